#!/usr/bin/env python3
"""test_loom_torch.py -- loom's operations as PyTorch custom ops (`loomc aot --torch`,
docs/torch.md), on the GPU: each op eager, under torch.compile(fullgraph=True), and captured
in a CUDA graph and replayed on new inputs, each against a PyTorch reference within the error
model below; the argument checks (ValueError naming the argument); torch.export; then a small
bench in the same process (the LCE op against torch's decomposed form at the headline, the FA
op against broadcast + SDPA).  Without torch or a GPU it prints "skipped: ..." and exits 0.

    python3 tests/torch/test_loom_torch.py [--loomc PATH] [--dir DIR] [--no-bench]

The error model (per element; u = 2^-24, the f32 accumulation's unit roundoff, gamma_n =
n u / (1 - n u), the bound of a sum of n products evaluated in any order; h = 2^-11, the
16-bit output's half ulp, relative):
  LCE   |out - ref| <= 2 gamma_K S + h |uh| + h |ref| + 2^-24, where K = Ku + Kc + 2 terms,
        S = |w_user| |e_user[map]| + |w_cand| |e_cand| (the sums of |products|), uh the user
        half (stage 4 may keep it in 16 bits once) and ref the f32 reference (itself within
        gamma_K S of the exact value: hence 2 gamma_K);
  gemm  the same with K terms and no user half;
  FA    |out - ref| <= A (2 h + gamma_S + 2 ds + 2^-20) + h |ref| + 2^-24, where A = P |v|
        (the reference's softmax weights on |v|), h twice for P rounded to 16 bits for the PV
        product and the row sum taken from unrounded P, gamma_S the PV sum over S keys, ds =
        gamma_D max_j (|q| |k_j|) / sqrt(D) the scores' error, which moves each weight by at
        most a factor e^(2 ds), and 2^-20 for ex2.approx.
"""
import argparse
import importlib.util
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import torch
except Exception as e:  # noqa: BLE001 -- any import failure means no torch here
    print("skipped: torch does not import (%s)" % e)
    sys.exit(0)
if not torch.cuda.is_available():
    print("skipped: torch has no CUDA device")
    sys.exit(0)

U_F32 = 2.0 ** -24
H16 = 2.0 ** -11
FAILS = []


def gamma(n):
    return n * U_F32 / (1 - n * U_F32)


def verdict(what, out, ref, bound, peer=False):
    """out against ref within bound, element by element; a peer's output (peer=True) is
    reported, not failed: the bound is loom's kernel's."""
    err = (out.float() - ref).abs()
    bad = ~(err <= bound)  # NaN fails too
    worst = (err / bound).max().item()
    if bad.any():
        i = bad.nonzero()[0].tolist()
        if not peer:
            FAILS.append(what)
        print("%s %s: %d elements past the bound; first at %s: out %g ref %g bound %g" % (
            "note" if peer else "FAIL", what, bad.sum().item(), i, out.float()[tuple(i)].item(), ref[tuple(i)].item(), bound[tuple(i)].item()))
    else:
        print("ok   %s: worst %.3f of the bound" % (what, worst))


def expect_value_error(what, fn, name):
    try:
        fn()
    except ValueError as e:
        if name in str(e):
            print("ok   %s: ValueError naming %s (%s)" % (what, name, e))
            return
        FAILS.append(what)
        print("FAIL %s: ValueError without '%s': %s" % (what, name, e))
        return
    except Exception as e:  # noqa: BLE001
        FAILS.append(what)
        print("FAIL %s: %s instead of ValueError" % (what, type(e).__name__))
        return
    FAILS.append(what)
    print("FAIL %s: no error" % what)


def generate(loomc, d, name, shape, prefix):
    cmd = [loomc, "aot", name, "--shape", shape, "--torch", "--prefix", prefix, "-o", d]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("FAIL: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    spec = importlib.util.spec_from_file_location(prefix + "_torch", os.path.join(d, prefix + "_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def graph_check(what, fn, inputs, refresh, ref_fn, bound_fn):
    """Capture fn(*inputs) in a CUDA graph (after a warm-up on a side stream, which loads the
    modules), refresh the inputs in place, replay, check against the reference."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(*inputs)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn(*inputs)
    refresh()
    g.replay()
    torch.cuda.synchronize()
    verdict(what + ", CUDA graph replay on new inputs", out, ref_fn(), bound_fn())


# About 1.5 ms of a spinning kernel: long enough for the host to queue the first calls of
# any timed form (the slowest, torch.compile'd loom, costs the host about 0.12 ms a call).
SLEEP_CYCLES = 3_000_000


def time_calls(fn, calls):
    """fn's time a call over `calls` calls back to back between two events, the queue kept
    ahead of the GPU so the host's launch cost hides behind the kernels as in a model's
    forward pass: the GPU spins first (not timed) while the host queues the first calls,
    which would otherwise add one call's host cost to the timed interval."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(SLEEP_CYCLES)
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / calls


def capture(fn):
    """fn captured once in a CUDA graph (warmed up on a side stream): its replay, which has no
    host cost at all."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def bench_rounds(fns, rounds=11, calls=20, warm_ms=200.0):
    """Each of fns' (name -> fn) time a call, timed side by side: each warmed up for about
    warm_ms (the clocks settle before the first round), then `rounds` rounds that time every
    fn in turn, so a drift of the GPU's clock or of its neighbours touches all alike; the
    median of each fn's rounds."""
    for fn in fns.values():
        t = time_calls(fn, 3)
        for _ in range(max(1, int(warm_ms / max(t, 1e-3) / calls))):
            time_calls(fn, calls)
    times = {n: [] for n in fns}
    for _ in range(rounds):
        for n, fn in fns.items():
            times[n].append(time_calls(fn, calls))
    return {n: sorted(t)[len(t) // 2] for n, t in times.items()}


# ---------------------------------------------------------------- LCE
def lce_ref(w_user, w_cand, e_user, e_cand, m):
    wu, wc, eu, ec = w_user.float(), w_cand.float(), e_user.float(), e_cand.float()
    uh = torch.matmul(wu, eu)[m.long()]
    ref = uh + torch.matmul(wc, ec)
    s = torch.matmul(wu.abs(), eu.abs())[m.long()] + torch.matmul(wc.abs(), ec.abs())
    K = w_user.shape[1] + w_cand.shape[1] + 2
    return ref, 2 * gamma(K) * s + H16 * uh.abs() + H16 * ref.abs() + 2.0 ** -24


def test_lce(mod, M, N, Ku, Kc, B, U):
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(1)
    w_user = torch.randn(M, Ku, device=dev, generator=g).half()
    w_cand = torch.randn(M, Kc, device=dev, generator=g).half()
    e_user = torch.randn(U, Ku, N, device=dev, generator=g).half()
    e_cand = torch.randn(B, Kc, N, device=dev, generator=g).half()
    m = torch.randint(0, U, (B,), device=dev, generator=g, dtype=torch.int32)
    op = torch.ops.loom.ikbo_lce
    ref, bound = lce_ref(w_user, w_cand, e_user, e_cand, m)
    verdict("loom::ikbo_lce eager B=%d U=%d" % (B, U), op(w_user, w_cand, e_user, e_cand, m), ref, bound)
    f = torch.compile(lambda a, b, c, d, e: op(a, b, c, d, e) * 1, fullgraph=True)
    verdict("loom::ikbo_lce torch.compile(fullgraph=True)", f(w_user, w_cand, e_user, e_cand, m), ref, bound)

    def refresh():
        e_cand.copy_(torch.randn(B, Kc, N, device=dev, generator=g).half())
        m.copy_(torch.randint(0, U, (B,), device=dev, generator=g, dtype=torch.int32))
    graph_check("loom::ikbo_lce", op, (w_user, w_cand, e_user, e_cand, m), refresh,
                lambda: lce_ref(w_user, w_cand, e_user, e_cand, m)[0], lambda: lce_ref(w_user, w_cand, e_user, e_cand, m)[1])
    # the checks
    expect_value_error("ikbo_lce dtype", lambda: op(w_user.float(), w_cand, e_user, e_cand, m), "w_cand")
    expect_value_error("ikbo_lce map dtype", lambda: op(w_user, w_cand, e_user, e_cand, m.long()), "cand_to_user")
    expect_value_error("ikbo_lce contiguity", lambda: op(w_user, w_cand, e_user, e_cand.transpose(1, 2), m), "e_cand")
    expect_value_error("ikbo_lce shape", lambda: op(w_user, w_cand[:, :-1].contiguous(), e_user, e_cand, m), "w_cand")
    expect_value_error("ikbo_lce device", lambda: op(w_user, w_cand, e_user.cpu(), e_cand, m), "e_user")

    class Lce(torch.nn.Module):
        def forward(self, a, b, c, d, e):
            return torch.ops.loom.ikbo_lce(a, b, c, d, e)
    try:
        ep = torch.export.export(Lce(), (w_user, w_cand, e_user, e_cand, m))
        ok = "loom.ikbo_lce" in str(ep.graph)
        print("%s torch.export: the op %s in the exported graph" % ("ok  " if ok else "FAIL", "is" if ok else "is not"))
        if not ok:
            FAILS.append("lce export")
    except Exception as e:  # noqa: BLE001
        FAILS.append("lce export")
        print("FAIL torch.export: %s: %s" % (type(e).__name__, e))


def bench_lce(B, U, M, N, Ku, Kc):
    dev = "cuda"
    w_user = torch.randn(M, Ku, device=dev).half()
    w_cand = torch.randn(M, Kc, device=dev).half()
    e_user = torch.randn(U, Ku, N, device=dev).half()
    e_cand = torch.randn(B, Kc, N, device=dev).half()
    m = torch.randint(0, U, (B,), device=dev, dtype=torch.int32)
    ml = m.long()
    lop = lambda: torch.ops.loom.ikbo_lce(w_user, w_cand, e_user, e_cand, m)
    dec = lambda: torch.matmul(w_user, e_user)[ml] + torch.matmul(w_cand, e_cand)
    cop = torch.compile(lambda a, b, c, d, e: torch.ops.loom.ikbo_lce(a, b, c, d, e), fullgraph=True)
    ref, bound = lce_ref(w_user, w_cand, e_user, e_cand, m)
    verdict("bench lce: loom's output at the headline, eager", lop(), ref, bound)
    verdict("bench lce: loom's output at the headline, torch.compile", cop(w_user, w_cand, e_user, e_cand, m), ref,
            bound)
    del ref, bound
    t = bench_rounds({"loom": lop, "torch": dec, "loom_c": lambda: cop(w_user, w_cand, e_user, e_cand, m),
                      "loom_g": capture(lop), "torch_g": capture(dec)})
    print("bench lce B=%d U=%d M=%d N=%d Ku=%d Kc=%d: eager loom op %.3f ms, torch decomposed %.3f ms, torch/loom %.2fx; "
          "torch.compile loom op %.3f ms (%.2fx); CUDA graph replay loom %.3f ms, decomposed %.3f ms, %.2fx"
          % (B, U, M, N, Ku, Kc, t["loom"], t["torch"], t["torch"] / t["loom"], t["loom_c"], t["torch"] / t["loom_c"],
             t["loom_g"], t["torch_g"], t["torch_g"] / t["loom_g"]))


# ---------------------------------------------------------------- FA
def fa_ref(q, k, v, m, S, nseed):
    B, U = m.shape[0], k.shape[0] // S
    H, D = q.shape[1], q.shape[2]
    qf = q.float().view(B, nseed, H, D).transpose(1, 2)                 # [B, H, n, D]
    kf = k.float().view(U, S, H, D)[m.long()].transpose(1, 2)           # [B, H, S, D]
    vf = v.float().view(U, S, H, D)[m.long()].transpose(1, 2)
    p = torch.softmax(torch.matmul(qf, kf.transpose(-1, -2)) / math.sqrt(D), dim=-1)
    ref = torch.matmul(p, vf)
    a = torch.matmul(p, vf.abs())
    ds = gamma(D) * torch.matmul(qf.abs(), kf.abs().transpose(-1, -2)).amax(-1, keepdim=True) / math.sqrt(D)
    bound = a * (2 * H16 + gamma(S) + 2 * ds + 2.0 ** -20) + H16 * ref.abs() + 2.0 ** -24
    back = lambda t: t.transpose(1, 2).reshape(B * nseed, H, D)  # noqa: E731
    return back(ref), back(bound)


def test_fa(mod, S, H, D, nseed, B, U):
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(2)
    q = torch.randn(B * nseed, H, D, device=dev, generator=g).half()
    k = torch.randn(U * S, H, D, device=dev, generator=g).half()
    v = torch.randn(U * S, H, D, device=dev, generator=g).half()
    m = torch.randint(0, U, (B,), device=dev, generator=g, dtype=torch.int32)
    ops = torch.ops.loom
    ref, bound = fa_ref(q, k, v, m, S, nseed)
    verdict("loom::ikbo_fa eager B=%d U=%d" % (B, U), ops.ikbo_fa(q, k, v, m), ref, bound)
    f = torch.compile(lambda a, b, c, d: ops.ikbo_fa(a, b, c, d) * 1, fullgraph=True)
    verdict("loom::ikbo_fa torch.compile(fullgraph=True)", f(q, k, v, m), ref, bound)
    plan = ops.ikbo_fa_plan(q, k, v, m)  # outside the captured region: made on the host
    verdict("loom::ikbo_fa_planned eager", ops.ikbo_fa_planned(q, k, v, plan, B, U), ref, bound)

    def refresh():  # new values, the same mapping (the plan is the mapping's)
        q.copy_(torch.randn(B * nseed, H, D, device=dev, generator=g).half())
        v.copy_(torch.randn(U * S, H, D, device=dev, generator=g).half())
    graph_check("loom::ikbo_fa_planned", lambda a, b, c: ops.ikbo_fa_planned(a, b, c, plan, B, U), (q, k, v), refresh,
                lambda: fa_ref(q, k, v, m, S, nseed)[0], lambda: fa_ref(q, k, v, m, S, nseed)[1])
    bad = m.clone()
    bad[B // 2] = U
    expect_value_error("ikbo_fa mapping out of range", lambda: ops.ikbo_fa(q, k, v, bad), "cand_to_user")
    expect_value_error("ikbo_fa dtype", lambda: ops.ikbo_fa(q, k.float(), v, m), "k")
    expect_value_error("ikbo_fa contiguity", lambda: ops.ikbo_fa(q.transpose(0, 1).contiguous().transpose(0, 1), k, v, m), "q")


def bench_fa(B, U, S, H, D, nseed):
    dev = "cuda"
    q = torch.randn(B * nseed, H, D, device=dev).half()
    k = torch.randn(U * S, H, D, device=dev).half()
    v = torch.randn(U * S, H, D, device=dev).half()
    m = torch.randint(0, U, (B,), device=dev, dtype=torch.int32)
    ml = m.long()
    ops = torch.ops.loom
    plan = ops.ikbo_fa_plan(q, k, v, m)
    planned = lambda: ops.ikbo_fa_planned(q, k, v, plan, B, U)
    cfa = torch.compile(lambda a, b, c, p: ops.ikbo_fa_planned(a, b, c, p, B, U), fullgraph=True)
    qb = q.view(B, nseed, H, D).transpose(1, 2)

    def sdpa():
        kb = k.view(U, S, H, D)[ml].transpose(1, 2)
        vb = v.view(U, S, H, D)[ml].transpose(1, 2)
        return torch.nn.functional.scaled_dot_product_attention(qb, kb, vb)
    # every timed form's output checked at the headline (the replays below run the same launches)
    ref, bound = fa_ref(q, k, v, m, S, nseed)
    verdict("bench fa: loom::ikbo_fa_planned eager", planned(), ref, bound)
    verdict("bench fa: loom::ikbo_fa_planned torch.compile", cfa(q, k, v, plan), ref, bound)
    verdict("bench fa: loom::ikbo_fa eager", ops.ikbo_fa(q, k, v, m), ref, bound)
    verdict("bench fa: torch broadcast + SDPA (the peer, reported)", sdpa().transpose(1, 2).reshape(B * nseed, H, D),
            ref, bound, peer=True)
    torch.cuda.empty_cache()
    t = bench_rounds({"loom": planned, "torch": sdpa, "loom_c": lambda: cfa(q, k, v, plan),
                      "loom_eager": lambda: ops.ikbo_fa(q, k, v, m), "loom_g": capture(planned),
                      "torch_g": capture(sdpa)})
    # after hundreds of launches on the stream's one schedule counter, which each leaves zero
    verdict("bench fa: loom::ikbo_fa_planned eager, after the timed rounds", planned(), ref, bound)
    print("bench fa B=%d U=%d S=%d H=%d D=%d n_seed=%d: eager loom planned %.3f ms (with the host plan each call %.3f "
          "ms), torch broadcast + SDPA %.3f ms, torch/loom %.2fx; torch.compile loom planned %.3f ms (%.2fx); CUDA graph "
          "replay loom planned %.3f ms, torch %.3f ms, %.2fx"
          % (B, U, S, H, D, nseed, t["loom"], t["loom_eager"], t["torch"], t["torch"] / t["loom"], t["loom_c"],
             t["torch"] / t["loom_c"], t["loom_g"], t["torch_g"], t["torch_g"] / t["loom_g"]))


# ---------------------------------------------------------------- gemm (the generic launch)
def test_gemm(mod, M, N, K):
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(3)
    a = torch.randn(M, K, device=dev, generator=g).half()
    b = torch.randn(K, N, device=dev, generator=g).half()

    def refb():
        ref = a.float() @ b.float()
        return ref, 2 * gamma(K) * (a.float().abs() @ b.float().abs()) + H16 * ref.abs() + 2.0 ** -24
    op = torch.ops.loom.gemm
    ref, bound = refb()
    verdict("loom::gemm eager M=%d" % M, op(a, b), ref, bound)
    sub = a[: M // 2 + 1].contiguous()  # M is run-time: fewer rows
    verdict("loom::gemm eager M=%d" % sub.shape[0], op(sub, b), sub.float() @ b.float(),
            2 * gamma(K) * (sub.float().abs() @ b.float().abs()) + H16 * (sub.float() @ b.float()).abs() + 2.0 ** -24)
    f = torch.compile(lambda x, y: op(x, y) + 0, fullgraph=True)
    verdict("loom::gemm torch.compile(fullgraph=True)", f(a, b), ref, bound)

    def refresh():
        a.copy_(torch.randn(M, K, device=dev, generator=g).half())
    graph_check("loom::gemm", op, (a, b), refresh, lambda: refb()[0], lambda: refb()[1])
    expect_value_error("gemm shape", lambda: op(a, b[:-1]), "B")
    expect_value_error("gemm dtype", lambda: op(a.float(), b), "A")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loomc", default=shutil.which("loomc") or "loomc")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--no-bench", action="store_true")
    o = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # the references in f32
    torch.backends.cudnn.allow_tf32 = False
    d = o.dir or tempfile.mkdtemp(prefix="loom-torch-")
    os.makedirs(d, exist_ok=True)
    print("torch %s on %s; files in %s" % (torch.__version__, torch.cuda.get_device_name(), d))
    t0 = time.time()
    lce = generate(o.loomc, d, "ikbo_lce", "B=1024,U=15,M=433,N=256,Ku=1178,Kc=866", "tl_lce")
    fa = generate(o.loomc, d, "ikbo_fa", "B=2048,U=32,S=1024,H=2,D=128,n_seed=64", "tl_fa")
    gm = generate(o.loomc, d, "gemm", "M=300,N=200,K=136", "tl_gemm")
    print("generated and loaded in %.1f s" % (time.time() - t0))
    test_lce(lce, 433, 256, 1178, 866, 200, 7)
    test_lce(lce, 433, 256, 1178, 866, 1024, 15)
    test_fa(fa, 1024, 2, 128, 64, 48, 5)
    test_gemm(gm, 300, 200, 136)
    if not o.no_bench:
        bench_lce(1024, 15, 433, 256, 1178, 866)
        bench_fa(2048, 32, 1024, 2, 128, 64)
    if FAILS:
        print("test_loom_torch: FAILED: %s" % ", ".join(FAILS))
        return 1
    print("test_loom_torch: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
