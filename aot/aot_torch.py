# ---------------------------------------------------------------- the run-time part
# aot_torch.py -- the run-time part of every P_torch.py that `loomc aot --torch` writes
# (aot/aot.c copies this text in after the file's table _LOOM, and the generic ops after it).
#
# It builds P.c (beside this module) with the system C compiler into a shared library,
# loads it with ctypes (no loom, no PyTorch headers), and registers the file's operations
# as torch.library.custom_op's in the namespace "loom", each with a fake implementation
# (register_fake), so that torch.compile(fullgraph=True) and torch.export see opaque ops.
# Every launch goes on torch's current CUDA stream; every buffer the operation needs comes
# from PyTorch's caching allocator (torch.empty/zeros on the device, passed as pointers):
# the C functions used here allocate nothing, copy nothing from the host and never
# synchronize (P_ikbo_lce_run_buffers, P_ikbo_fa_launch_plan, P_T_launch), so those ops
# can be captured in a CUDA graph.  The one exception is the FA work plan, which is made on
# the host from the mapping (loom::ikbo_fa reads cand_to_user back: a synchronization);
# loom::ikbo_fa_plan (outside the captured region) and loom::ikbo_fa_planned (inside) split
# it.  docs/torch.md in loom explains the ops.
import ctypes
import hashlib
import os
import subprocess
import tempfile
import threading
import typing

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_P = _LOOM["prefix"]
_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32,
           "i64": torch.int64, "i1": torch.bool}
for _n, _t in (("e4m3", "float8_e4m3fn"), ("e5m2", "float8_e5m2")):  # torch 2.1 and newer
    if hasattr(torch, _t):
        _DTYPES[_n] = getattr(torch, _t)
_LOCK = threading.Lock()
_LIB = None


def _build_dir():
    """Where the shared library goes: beside this module, else (read-only) the temp directory."""
    if os.access(_HERE, os.W_OK):
        return _HERE
    d = os.path.join(tempfile.gettempdir(), "loom-torch-%d" % os.getuid())
    os.makedirs(d, exist_ok=True)
    return d


def _lib():
    """P.c built once ($CC, else cc; the library is named by P.c's hash, so a regenerated
    file is rebuilt) and loaded."""
    global _LIB
    with _LOCK:
        if _LIB is not None:
            return _LIB
        src = os.path.join(_HERE, _P + ".c")
        with open(src, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:16]
        path = os.path.join(_build_dir(), "lib%s_%s.so" % (_P, digest))
        if not os.path.exists(path):
            tmp = "%s.%d.tmp" % (path, os.getpid())
            cmd = [os.environ.get("CC", "cc"), "-std=c11", "-O2", "-fPIC", "-shared", "-o", tmp, src, "-ldl",
                   "-lpthread"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError("%s_torch: building %s failed (%s):\n%s" % (_P, src, " ".join(cmd), r.stderr))
            os.replace(tmp, path)
        lib = ctypes.CDLL(path)
        _LIB = lib
        return lib


def _last_error():
    """The launcher's last error.  (A CDLL item is a new function object each time, so its
    restype is set on the one called.)"""
    f = _lib()[_P + "_last_error"]
    f.restype = ctypes.c_char_p
    return (f() or b"").decode()


_FNS = {}


def _fn(name, argtypes):
    """The launcher's function `name` with its argument types, made once (a launch's own cost
    in Python is what an eager op pays each call)."""
    f = _FNS.get(name)
    if f is None:
        f = _lib()[_P + "_" + name]
        f.argtypes = argtypes
        f.restype = ctypes.c_int
        _FNS[name] = f
    return f


def _call(name, f, *args):
    st = f(*args)
    if st != 0:
        raise RuntimeError("%s_%s: %s" % (_P, name, _last_error()))


class _Shape(ctypes.Structure):
    _fields_ = [(k, ctypes.c_int64) for k in _LOOM["keys"]]


_SHAPES = {}


def _shape(row, **req):
    """The C shape struct of row `row`, with the run-time keys in req replaced (the row's own,
    read only by the launcher, made once)."""
    if not req and row in _SHAPES:
        return _SHAPES[row]
    vals = dict(zip(_LOOM["keys"], _LOOM["rows"][row]))
    vals.update(req)
    sh = _Shape(*[int(vals[k]) for k in _LOOM["keys"]])
    if not req:
        _SHAPES[row] = sh
    return sh


def _stream(device):
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _ptr(name, t):
    p = t.data_ptr()
    if p % 16:
        raise ValueError("%s: at 0x%x, not 16-byte aligned (the kernels' vector accesses need it)" % (name, p))
    return ctypes.c_uint64(p)


def _check(op, name, t, dtype=None, rank=None, device=None, contiguous=True):
    """A clear ValueError naming the argument: a CUDA tensor, of dtype, of rank, contiguous."""
    if not isinstance(t, torch.Tensor):
        raise ValueError("%s: %s is a %s, not a tensor" % (op, name, type(t).__name__))
    if t.device.type != "cuda":
        raise ValueError("%s: %s is on %s, not on a CUDA device" % (op, name, t.device))
    if device is not None and t.device != device:
        raise ValueError("%s: %s is on %s, the other arguments on %s" % (op, name, t.device, device))
    if dtype is not None and t.dtype != dtype:
        raise ValueError("%s: %s is %s, expected %s" % (op, name, t.dtype, dtype))
    if rank is not None and t.dim() != rank:
        raise ValueError("%s: %s has shape %s, expected %d dims" % (op, name, tuple(t.shape), rank))
    if contiguous and not t.is_contiguous():
        raise ValueError("%s: %s is not contiguous (strides %s; call .contiguous())" % (op, name, t.stride()))


def _bucket_log2(v):
    return (int(v) - 1).bit_length()


def _rows_text():
    keys = _LOOM["keys"]
    return "; ".join(",".join("%s%s%d" % (k, "<=" if _LOOM["runtime"][j] else "=", r[j]) for j, k in enumerate(keys))
                     for r in _LOOM["rows"])


def _pick_row(op, static, req):
    """The row serving a request, by the C file's rule: its static keys equal, its run-time keys'
    maxima hold the request's values, of those the smallest buckets (ties: the first)."""
    keys = _LOOM["keys"]
    best, cost = -1, None
    for i, row in enumerate(_LOOM["rows"]):
        vals = dict(zip(keys, row))
        if any(vals[k] != v for k, v in static.items()):
            continue
        if any(v < 1 or v > vals[k] for k, v in req.items()):
            continue
        c = sum(_bucket_log2(vals[k]) for k in req)
        if cost is None or c < cost:
            best, cost = i, c
    if best < 0:
        want = ",".join("%s=%s" % kv for kv in list(static.items()) + list(req.items()))
        raise ValueError("%s: no kernel of this file serves %s (it has %s); regenerate with loomc aot %s --shape ..."
                         % (op, want, _rows_text(), _LOOM["template"]))
    return best


def _dtype_index(op, name, t):
    for i, n in enumerate(_LOOM["dtype_names"]):
        if _DTYPES.get(n) == t.dtype:
            return i
    raise ValueError("%s: %s is %s, which no loom kernel takes" % (op, name, t.dtype))


# ---------------------------------------------------------------- loom::ikbo_lce
if _LOOM["op"] == "ikbo_lce":
    _LCE_NBUF = _LOOM["lce_nbuf"]
    _lce_layouts = {}

    def _lce_layout(row):
        """Row row's buffers: each one's bytes, and the weights' fills {buffer, weight, ld, column}."""
        if row not in _lce_layouts:
            nbytes = (ctypes.c_size_t * _LCE_NBUF)()
            fills = (ctypes.c_int64 * 8)()
            nfill = ctypes.c_int()
            f = _fn("ikbo_lce_buffers", [ctypes.POINTER(_Shape), ctypes.POINTER(ctypes.c_size_t * _LCE_NBUF),
                                         ctypes.POINTER(ctypes.c_int64 * 8), ctypes.POINTER(ctypes.c_int)])
            _call("ikbo_lce_buffers", f, ctypes.byref(_shape(row)), ctypes.byref(nbytes), ctypes.byref(fills),
                  ctypes.byref(nfill))
            _lce_layouts[row] = (list(nbytes), [tuple(fills[4 * j:4 * j + 4]) for j in range(nfill.value)])
        return _lce_layouts[row]

    def _lce_sizes(w_user, w_cand, e_user, e_cand, cand_to_user):
        op = "loom::ikbo_lce"
        _check(op, "w_user", w_user, rank=2)
        dt = w_user.dtype
        dev = w_user.device
        _check(op, "w_cand", w_cand, dtype=dt, rank=2, device=dev)
        _check(op, "e_user", e_user, dtype=dt, rank=3, device=dev)
        _check(op, "e_cand", e_cand, dtype=dt, rank=3, device=dev)
        _check(op, "cand_to_user", cand_to_user, dtype=torch.int32, rank=1, device=dev)
        M, Ku = w_user.shape
        U, N = e_user.shape[0], e_user.shape[2]
        B = e_cand.shape[0]
        Kc = w_cand.shape[1]
        for name, t, want in (("w_cand", w_cand, (M, Kc)), ("e_user", e_user, (U, Ku, N)),
                              ("e_cand", e_cand, (B, Kc, N)), ("cand_to_user", cand_to_user, (B,))):
            if tuple(t.shape) != want:
                raise ValueError("%s: %s has shape %s, expected %s (w_user [M, Ku], w_cand [M, Kc], e_user [U, Ku, N], "
                                 "e_cand [B, Kc, N], cand_to_user [B])" % (op, name, tuple(t.shape), want))
        row = _pick_row(op, {"M": M, "N": N, "Ku": Ku, "Kc": Kc, "dtype": _dtype_index(op, "w_user", w_user)},
                        {"B": B, "U": U})
        return row, B, U, M, N, Ku, Kc

    @torch.library.custom_op("loom::ikbo_lce", mutates_args=(), device_types="cuda")
    def ikbo_lce(w_user: torch.Tensor, w_cand: torch.Tensor, e_user: torch.Tensor, e_cand: torch.Tensor,
                 cand_to_user: torch.Tensor) -> torch.Tensor:
        """out[b] = w_user @ e_user[cand_to_user[b]] + w_cand @ e_cand[b]: [B, M, N] (cand_to_user's
        entries must be users, 0 to U - 1: they are read on the GPU only, unchecked)."""
        row, B, U, M, N, Ku, Kc = _lce_sizes(w_user, w_cand, e_user, e_cand, cand_to_user)
        dev = e_cand.device
        nbytes, fills = _lce_layout(row)
        out = torch.empty((B, M, N), dtype=e_cand.dtype, device=dev)
        # the operation's buffers, from the caching allocator, zero (as prepare leaves them;
        # the stage-4 flags count from zero), the weights padded into theirs
        own = {i: torch.zeros(nbytes[i], dtype=torch.uint8, device=dev) for i in range(4, _LCE_NBUF) if nbytes[i]}
        esz = w_user.element_size()
        for buf, weight, ld, col0 in fills:
            w, K = (w_user, Ku) if weight == 0 else (w_cand, Kc)
            own[buf][:M * ld * esz].view(w.dtype).view(M, ld)[:, col0:col0 + K].copy_(w)
        bufs = (ctypes.c_uint64 * _LCE_NBUF)()
        for i, (name, t) in enumerate((("e_user", e_user), ("e_cand", e_cand), ("cand_to_user", cand_to_user),
                                       ("out", out))):
            bufs[i] = _ptr(name, t).value
        for i, t in own.items():
            bufs[i] = t.data_ptr()
        f = _fn("ikbo_lce_run_buffers", [ctypes.POINTER(_Shape), ctypes.c_int64, ctypes.c_int64,
                                         ctypes.POINTER(ctypes.c_uint64 * _LCE_NBUF), ctypes.c_void_p])
        with torch.cuda.device(dev):
            _call("ikbo_lce_run_buffers", f, ctypes.byref(_shape(row)), B, U, ctypes.byref(bufs), _stream(dev))
        return out

    @ikbo_lce.register_fake
    def _(w_user, w_cand, e_user, e_cand, cand_to_user):
        row, B, U, M, N, Ku, Kc = _lce_sizes(w_user, w_cand, e_user, e_cand, cand_to_user)
        return e_cand.new_empty((B, M, N))


# ---------------------------------------------------------------- loom::ikbo_fa, _plan, _planned
if _LOOM["op"] == "ikbo_fa":
    _FIELDS = _LOOM["fa_fields"]

    def _fa_sizes(op, q, k, v, B, U, seq_len):
        """The row serving q [B * n_seed, H, D], k and v [U * S, H, D], seq_len [U] or None."""
        _check(op, "q", q, rank=3)
        dt, dev = q.dtype, q.device
        _check(op, "k", k, dtype=dt, rank=3, device=dev)
        _check(op, "v", v, dtype=dt, rank=3, device=dev)
        if tuple(v.shape) != tuple(k.shape):
            raise ValueError("%s: v has shape %s, k %s: they must be equal" % (op, tuple(v.shape), tuple(k.shape)))
        if seq_len is not None:
            _check(op, "seq_len", seq_len, dtype=torch.int32, rank=1, device=dev)
            if seq_len.shape[0] != U:
                raise ValueError("%s: seq_len has shape %s, expected (%d,) (a length a user)" % (op, tuple(seq_len.shape), U))
        H, D = q.shape[1], q.shape[2]
        if tuple(k.shape[1:]) != (H, D):
            raise ValueError("%s: k has shape %s, expected [U * S, %d, %d] (q's heads and head dim)" % (op, tuple(k.shape), H, D))
        if B < 1 or q.shape[0] % B:
            raise ValueError("%s: q has %d rows, not a multiple of B = %d candidates (q is [B * n_seed, H, D])" % (op, q.shape[0], B))
        if U < 1 or k.shape[0] % U:
            raise ValueError("%s: k has %d rows, not a multiple of U = %d users (k is [U * S, H, D])" % (op, k.shape[0], U))
        static = {"S": k.shape[0] // U, "H": H, "D": D, "n_seed": q.shape[0] // B,
                  "dtype": _dtype_index(op, "q", q), "varlen": int(seq_len is not None)}
        return _pick_row(op, static, {"B": B, "U": U})

    def _fa_make_plan(op, row, B, U, cand_to_user, seq_len):
        """The work plan on the host (cand_to_user and seq_len read back: a synchronization), on the device."""
        mx = ctypes.c_int64()
        _call("ikbo_fa_plan_max", _fn("ikbo_fa_plan_max", [ctypes.POINTER(_Shape), ctypes.POINTER(ctypes.c_int64)]),
              ctypes.byref(_shape(row)), ctypes.byref(mx))
        host = torch.empty((mx.value, _FIELDS), dtype=torch.int32)
        m = cand_to_user.to("cpu").contiguous()
        lens = seq_len.to("cpu").contiguous() if seq_len is not None else None
        n = ctypes.c_int64()
        f = _fn("ikbo_fa_make_plan", [ctypes.POINTER(_Shape), ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                      ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)])
        st = f(ctypes.byref(_shape(row)), B, U, ctypes.c_void_p(m.data_ptr()),
               ctypes.c_void_p(lens.data_ptr()) if lens is not None else None, ctypes.c_void_p(host.data_ptr()),
               ctypes.byref(n))
        if st != 0:  # a mapping entry or a length out of range: the caller's values
            raise ValueError("%s: %s" % (op, _last_error()))
        return host[:n.value].to(cand_to_user.device)

    _LENS = {}

    def _full_lens(dev, U, S):
        """[U] lengths of S each (the kernel reads none without varlen, but takes the address):
        made once a device, U and S, and only read."""
        key = (dev, U, S)
        t = _LENS.get(key)
        if t is None:
            t = torch.full((U,), S, dtype=torch.int32, device=dev)
            if not torch.cuda.is_current_stream_capturing():  # (not kept from a graph's pool)
                _LENS[key] = t
        return t

    _CLAIMS = {}

    def _fa_claims(dev):
        """The schedule's counter, zero when a launch starts; every launch leaves it zero.  Outside
        a captured region one a device and stream, made once: the launches on one stream run in
        order, so they take turns on it (and no fill runs before each).  Inside a capture a new one
        from the graph's pool, filled by the graph: a replay, on whatever stream, shares nothing."""
        if torch.cuda.is_current_stream_capturing():
            return torch.zeros(4, dtype=torch.int32, device=dev)
        key = (dev, torch.cuda.current_stream(dev).cuda_stream)
        t = _CLAIMS.get(key)
        if t is None:
            t = _CLAIMS[key] = torch.zeros(4, dtype=torch.int32, device=dev)
        return t

    def _fa_launch(op, row, B, U, q, k, v, plan, seq_len):
        dev = q.device
        S = _LOOM["rows"][row][_LOOM["keys"].index("S")]
        out = torch.empty_like(q)
        n = plan.shape[0]
        if n == 0:  # no unit (every length 0): the kernel still takes a plan's address
            plan = torch.zeros((1, _FIELDS), dtype=torch.int32, device=dev)
        lens = seq_len if seq_len is not None else _full_lens(dev, U, S)
        claims = _fa_claims(dev)
        f = _fn("ikbo_fa_launch_plan", [ctypes.POINTER(_Shape), ctypes.c_int64, ctypes.c_int64] +
                [ctypes.c_uint64] * 4 + [ctypes.c_int64] + [ctypes.c_uint64] * 3 + [ctypes.c_void_p])
        with torch.cuda.device(dev):
            _call("ikbo_fa_launch_plan", f, ctypes.byref(_shape(row)), B, U, _ptr("q", q), _ptr("k", k), _ptr("v", v),
                  _ptr("plan", plan), n, _ptr("seq_len", lens), _ptr("claims", claims), _ptr("out", out), _stream(dev))
        return out

    def _fa_map(op, cand_to_user, dev):
        _check(op, "cand_to_user", cand_to_user, dtype=torch.int32, rank=1, device=dev)
        return cand_to_user.shape[0]

    def _fa_users(op, k, seq_len, S=None):
        """U: seq_len's length, else k's rows over the S of the rows whose S divides them."""
        if seq_len is not None:
            return seq_len.shape[0]
        ss = sorted({r[_LOOM["keys"].index("S")] for r in _LOOM["rows"]})
        for s in ss:
            if k.shape[0] % s == 0:
                return k.shape[0] // s
        raise ValueError("%s: k has %d rows, a multiple of no S of this file (%s): k is [U * S, H, D]" % (op, k.shape[0], ss))

    @torch.library.custom_op("loom::ikbo_fa", mutates_args=(), device_types="cuda")
    def ikbo_fa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cand_to_user: torch.Tensor,
                seq_len: typing.Optional[torch.Tensor] = None) -> torch.Tensor:
        """out[b] = softmax(q[b] k[u]^T / sqrt(D)) v[u], u = cand_to_user[b]: [B * n_seed, H, D].
        Makes the work plan on the host (reads cand_to_user back): not capturable; see
        ikbo_fa_plan and ikbo_fa_planned."""
        op = "loom::ikbo_fa"
        B = _fa_map(op, cand_to_user, q.device)
        U = _fa_users(op, k, seq_len)
        row = _fa_sizes(op, q, k, v, B, U, seq_len)
        plan = _fa_make_plan(op, row, B, U, cand_to_user, seq_len)
        return _fa_launch(op, row, B, U, q, k, v, plan, seq_len)

    @ikbo_fa.register_fake
    def _(q, k, v, cand_to_user, seq_len=None):
        op = "loom::ikbo_fa"
        B = _fa_map(op, cand_to_user, q.device)
        _fa_sizes(op, q, k, v, B, _fa_users(op, k, seq_len), seq_len)
        return torch.empty_like(q)

    @torch.library.custom_op("loom::ikbo_fa_plan", mutates_args=(), device_types="cuda")
    def ikbo_fa_plan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cand_to_user: torch.Tensor,
                     seq_len: typing.Optional[torch.Tensor] = None) -> torch.Tensor:
        """The work plan of a request ([units, FIELDS] int32 on the device), made on the host: it
        reads cand_to_user back (a synchronization), so make it outside a captured region; q, k and
        v only give the shape."""
        op = "loom::ikbo_fa_plan"
        B = _fa_map(op, cand_to_user, q.device)
        U = _fa_users(op, k, seq_len)
        row = _fa_sizes(op, q, k, v, B, U, seq_len)
        return _fa_make_plan(op, row, B, U, cand_to_user, seq_len)

    @ikbo_fa_plan.register_fake
    def _(q, k, v, cand_to_user, seq_len=None):
        op = "loom::ikbo_fa_plan"
        B = _fa_map(op, cand_to_user, q.device)
        _fa_sizes(op, q, k, v, B, _fa_users(op, k, seq_len), seq_len)
        n = torch.library.get_ctx().new_dynamic_size()
        return cand_to_user.new_empty((n, _FIELDS))

    @torch.library.custom_op("loom::ikbo_fa_planned", mutates_args=(), device_types="cuda")
    def ikbo_fa_planned(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: torch.Tensor, B: int, U: int,
                        seq_len: typing.Optional[torch.Tensor] = None) -> torch.Tensor:
        """ikbo_fa with a plan from ikbo_fa_plan (of this request's cand_to_user, seq_len, B and U):
        a launch alone, capturable in a CUDA graph (replays use the plan's contents then)."""
        op = "loom::ikbo_fa_planned"
        row = _fa_sizes(op, q, k, v, B, U, seq_len)
        _check(op, "plan", plan, dtype=torch.int32, rank=2, device=q.device)
        if plan.shape[1] != _FIELDS:
            raise ValueError("%s: plan has shape %s, expected [units, %d] (from loom::ikbo_fa_plan)" % (op, tuple(plan.shape), _FIELDS))
        return _fa_launch(op, row, B, U, q, k, v, plan, seq_len)

    @ikbo_fa_planned.register_fake
    def _(q, k, v, plan, B, U, seq_len=None):
        _fa_sizes("loom::ikbo_fa_planned", q, k, v, B, U, seq_len)
        return torch.empty_like(q)


# ---------------------------------------------------------------- generic: one op per template
def _generic_resolve(op, inputs, extra):
    """The row and run-time dims serving the inputs ({name: tensor or scalar}) by their dtypes
    and shapes (extra: run-time keys given as arguments)."""
    g = _LOOM["generic"]
    keys = _LOOM["keys"]
    dev = None
    for a in g["args"][0]:
        if a[0] in inputs and a[1] == "ptr":
            if dev is None:
                _check(op, a[0], inputs[a[0]], contiguous=False)
                dev = inputs[a[0]].device
    why = []
    best, cost = None, None
    for i, row_args in enumerate(g["args"]):
        dims = dict(extra)
        bad = None
        for name, kind, access, dt, shape, strides in row_args:
            if kind != "ptr" or name not in inputs:
                continue
            t = inputs[name]
            _check(op, name, t, device=dev, contiguous=False)
            if t.dtype != _DTYPES[dt]:
                bad = "%s is %s, expected %s" % (name, t.dtype, _DTYPES[dt])
                break
            if t.dim() != len(shape):
                bad = "%s has shape %s, expected %d dims" % (name, tuple(t.shape), len(shape))
                break
            for d, s in enumerate(shape):
                if isinstance(s, str):  # a run-time key: at most the row's value
                    mx = keys.index(s)
                    if dims.setdefault(s, t.shape[d]) != t.shape[d]:
                        bad = "%s's dim %d is %s, but %s = %s elsewhere" % (name, d, t.shape[d], s, dims[s])
                    elif t.shape[d] < 1 or t.shape[d] > _LOOM["rows"][i][mx]:
                        bad = "%s's dim %d (%s) is %s, outside 1 to %d" % (name, d, s, t.shape[d], _LOOM["rows"][i][mx])
                elif t.shape[d] != s:
                    bad = "%s has shape %s, expected %s" % (name, tuple(t.shape), _generic_shape(shape, None))
                if bad:
                    break
            if not bad and tuple(t.stride()) != tuple(strides) and t.numel() > 1:
                bad = "%s has strides %s, expected %s (the kernel's layout: .contiguous() where it is row-major)" % (
                    name, tuple(t.stride()), tuple(strides))
            if bad:
                break
        if bad:
            why.append("row %d: %s" % (i + 1, bad))
            continue
        c = sum(_bucket_log2(_LOOM["rows"][i][keys.index(k)]) for k in dims)
        if cost is None or c < cost:
            best, cost = (i, dims), c
    if best is None:
        raise ValueError("%s: no kernel of this file serves these arguments (%s; the file has %s)" % (op, "; ".join(why),
                                                                                                      _rows_text()))
    return best[0], best[1], dev


def _generic_shape(shape, dims):
    return tuple(s if not isinstance(s, str) else (dims[s] if dims else s) for s in shape)


def _generic_outputs(row, dims, dev):
    outs = []
    for name, kind, access, dt, shape, strides in _LOOM["generic"]["args"][row]:
        if kind == "ptr" and access == "out":
            outs.append(torch.empty_strided(_generic_shape(shape, dims), strides, dtype=_DTYPES[dt], device=dev))
    return outs


def _generic_ret(outs):
    return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)


def _generic_fake(op, inputs, extra):
    row, dims, dev = _generic_resolve(op, inputs, extra)
    return _generic_ret(_generic_outputs(row, dims, dev))


def _generic_run(op, inputs, extra):
    row, dims, dev = _generic_resolve(op, inputs, extra)
    outs = _generic_outputs(row, dims, dev)
    it = iter(outs)
    ctypes_of = {"ptr": ctypes.c_uint64, "i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float}
    argtypes, args = [ctypes.POINTER(_Shape)], []
    for name, kind, access, dt, shape, strides in _LOOM["generic"]["args"][row]:
        if name in _LOOM["generic"]["dim_args"]:
            continue  # a run-time dim: the launch takes it from the shape
        argtypes.append(ctypes_of[kind])
        if kind == "ptr":
            args.append(_ptr(name, inputs[name] if access != "out" else next(it)))
        else:
            args.append(inputs[name])
    f = _fn(_LOOM["template"] + "_launch", argtypes + [ctypes.c_void_p])
    with torch.cuda.device(dev):
        _call(_LOOM["template"] + "_launch", f, ctypes.byref(_shape(row, **dims)), *args, _stream(dev))
    return _generic_ret(outs)
