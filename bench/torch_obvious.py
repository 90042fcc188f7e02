#!/usr/bin/env python3
"""torch_obvious.py -- the PyTorch peer of bench_obvious (issue 36), at the same shapes.

Rows (f16 unless named; fp32 accumulation and math where loom's kernels use it):
  gemm_bias_gelu MxNxK f16   gelu(a @ b + bias, approximate="tanh"), a [M, K], b [K, N],
                             bias [N]; M = N = K = 4096 and 2048
  rmsnorm 16384x4096 f16     (x * rsqrt(mean(x^2) + eps) * w) in f32, cast back (eps 1e-6)
  softmax 16384x4096 f16/f32 torch.softmax(x, -1)
each run eager, with torch.compile (default mode) and with
torch.compile(mode="max-autotune-no-cudagraphs") (its Triton GEMM templates with the
bias and GELU fused into the epilogue, or cuBLAS and a fused pointwise kernel, whichever it
measures faster), all with dynamic=False.  The GEMM rows also time the plain a @ b
(cuBLAS).  Each compiled result is compared with eager's before it is timed.

Timing, as bench_obvious's loom_time_work: warm-up runs, then `--reps` runs each preceded
by a write of twice the L2 (at least 256 MiB) outside its timed CUDA events; the median.  One line per
(row, mode), which bench_obvious --torch reads:

  torch_obvious: KEY | MODE | MEDIAN_MS | RATE

Without PyTorch or a GPU it prints why and exits 0.

Usage: python3 bench/torch_obvious.py [--reps N] [--no-autotune] [--only gemm|rows]
"""
import argparse
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--no-autotune", action="store_true", help="skip mode max-autotune-no-cudagraphs (minutes of tuning)")
    ap.add_argument("--only", choices=["gemm", "rows"], help="only the GEMM rows or only the row kernels")
    args = ap.parse_args()
    try:
        import torch
        import torch._dynamo
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 -- any import failure means: no peer here
        print(f"torch_obvious: skipped: PyTorch does not import ({e})")
        return 0
    if not torch.cuda.is_available():
        print("torch_obvious: skipped: PyTorch sees no CUDA device")
        return 0
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 0) or (50 << 20)
    # twice the L2, as loom_time_work, but at least 256 MiB (Triton's do_bench): the write
    # keeps the GPU busy longer than a compiled function's host overhead, which is then not timed
    flush_bytes = max(2 * l2, 256 << 20)
    print(f"torch_obvious on {props.name}: torch {torch.__version__}, triton {_triton_version()}, "
          f"L2 {l2 >> 20} MiB, {flush_bytes >> 20} MiB written before each timed run, {args.reps} runs, median")
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device=dev)

    def median_ms(fn, warmup=5):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.reps)]
        for i in range(args.reps):
            flush.fill_(i & 0xFF)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))

    modes = [("eager", None), ("compile", "default")]
    if not args.no_autotune:
        modes.append(("compile-max-autotune", "max-autotune-no-cudagraphs"))

    def run_row(key, fn, inputs, rate, tol):
        """Time fn eagerly and compiled; print one line per mode."""
        ref = fn(*inputs)
        for name, mode in modes:
            f = fn
            if mode is not None:
                torch._dynamo.reset()
                f = torch.compile(fn, mode=mode, dynamic=False)
                try:
                    out = f(*inputs)
                except Exception as e:  # noqa: BLE001 -- report and go on with the next mode
                    print(f"torch_obvious: {key} | {name} | failed: {type(e).__name__}: {str(e)[:200]}")
                    continue
                err = (out.float() - ref.float()).abs().max().item()
                if not err <= tol:
                    print(f"torch_obvious: {key} | {name} | differs from eager by {err:.3g} (> {tol}); not timed")
                    continue
            ms = median_ms(lambda: f(*inputs))
            print(f"torch_obvious: {key} | {name} | {ms:.4f} | {rate(ms)}", flush=True)

    torch.manual_seed(0)
    if args.only != "rows":
        for n in (4096, 2048):
            M = N = K = n
            a = (torch.rand(M, K, device=dev) * 2 - 1).half()
            b = ((torch.rand(K, N, device=dev) * 2 - 1) * (4 / K ** 0.5)).half()
            bias = (torch.rand(N, device=dev) * 2 - 1).half()
            flop = 2.0 * M * N * K
            tf = lambda ms: f"{flop / ms * 1e-9:.1f} TFLOP/s"  # noqa: E731
            key = f"gemm_bias_gelu {M}x{N}x{K} f16"
            run_row(key, lambda a, b, bias: F.gelu(a @ b + bias, approximate="tanh"), (a, b, bias), tf, 2e-2)
            ms = median_ms(lambda: a @ b)
            print(f"torch_obvious: matmul {M}x{N}x{K} f16 | eager (cuBLAS, no epilogue) | {ms:.4f} | {tf(ms)}", flush=True)
            del a, b, bias
    if args.only != "gemm":
        R, N = 16384, 4096

        def rmsnorm(x, w):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)

        for what, dt in (("rmsnorm", torch.float16), ("softmax", torch.float16), ("softmax", torch.float32)):
            x = ((torch.rand(R, N, device=dev) * 2 - 1) * (2 if what == "rmsnorm" else 8)).to(dt)
            nbytes = 2.0 * x.numel() * x.element_size()  # x read once, y written once
            gbs = lambda ms: f"{nbytes / ms * 1e-6:.0f} GB/s"  # noqa: E731
            key = f"{what} {R}x{N} {'f16' if dt == torch.float16 else 'f32'}"
            if what == "rmsnorm":
                w = (1 + 0.5 * (torch.rand(N, device=dev) * 2 - 1)).to(dt)
                run_row(key, rmsnorm, (x, w), gbs, 1e-2)
            else:
                run_row(key, lambda x: torch.softmax(x, -1), (x,), gbs, 2e-3)
            del x
        src = torch.empty(R * N * 2, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        ms = median_ms(lambda: dst.copy_(src))
        print(f"torch_obvious: copy {src.numel() >> 20} MiB | eager | {ms:.4f} | {2.0 * src.numel() / ms * 1e-6:.0f} GB/s",
              flush=True)
    return 0


def _triton_version():
    try:
        import triton
        return triton.__version__
    except Exception:  # noqa: BLE001
        return "not installed"


if __name__ == "__main__":
    sys.exit(main())
