"""CTC loss: ploss against PyTorch on the same CUDA tensors, in one process.

    python3 bench/ctc_bench.py --lib .gpu/build/libploss.so.0 [--runs 20] [--warmup 3]

For each case (T frames, N sequences, C classes, targets of up to S labels): log_softmax of
an N(0, 1) draw (torch, seed 0) in the case's dtype, padded targets of non-blank labels with
repeats, input lengths between 80 % and 100 % of T and target lengths between 50 % and 100 %
of S (numpy-free: torch's generator, seed 1).  Timed with CUDA events, median of --runs after
--warmup, forward and backward of the 'mean' loss:

  ploss        ploss_ctc_loss_fused (loss and gradient in one call; ploss's context on
               torch's current stream is not needed: both use the legacy default stream)
  torch        F.ctc_loss + .backward() (aten's native CUDA kernels: the log-probabilities
               require a gradient)
  torch cudnn  the same with int32 targets on the CPU, every input length T, blank 0 (the
               conditions under which PyTorch takes cuDNN's CTC; f32 only)

and compares ploss's loss and gradient with torch's in f64 (the loss's relative difference, the
gradient's largest difference over its largest value), so the run doubles as a check of the CUDA kernels against PyTorch.
Prints one markdown table.
"""
import argparse
import ctypes
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_bench import DLTensor, DLDataType, DL_OF_TORCH, Ploss  # noqa: E402

CASES = [
    # (T, N, C, S, dtype)
    (50, 16, 32, 20, "f32"),
    (200, 32, 64, 60, "f32"),
    (500, 32, 29, 150, "f32"),     # character-level ASR (LibriSpeech-like: 28 letters + blank)
    (1000, 16, 5000, 200, "f32"),  # a BPE vocabulary
    (500, 32, 29, 150, "bf16"),
]


class CtcOpts(ctypes.Structure):
    _fields_ = [("reduction", ctypes.c_int), ("blank", ctypes.c_int64), ("logits", ctypes.c_int),
                ("zero_infinity", ctypes.c_int), ("scale", ctypes.c_double), ("inplace", ctypes.c_int),
                ("opts_tag", ctypes.c_uint32)]


def dl(p, t):
    code, bits = DL_OF_TORCH[t.dtype]
    shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
    strides = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
    dev = p.dev
    d = DLTensor(ctypes.c_void_p(t.data_ptr()), dev, t.dim(), DLDataType(code, bits, 1), shape, strides, 0)
    return d, (shape, strides)


def graph_has(fn, word):
    """Whether a node of the autograd graph from fn has `word` in its name."""
    seen, todo = set(), [fn]
    while todo:
        f = todo.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        if word in f.name():
            return True
        todo.extend(g for g, _ in f.next_functions)
    return False


def timed(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    dev = torch.device("cuda")
    p = Ploss(args.lib, dev)
    L = p.lib
    L.ploss_ctc_loss_opts_init.argtypes = [ctypes.POINTER(CtcOpts)]
    L.ploss_ctc_loss_fused.argtypes = [ctypes.c_void_p] + [ctypes.POINTER(DLTensor)] * 4 + \
        [ctypes.POINTER(CtcOpts), ctypes.POINTER(DLTensor), ctypes.POINTER(DLTensor)]
    L.ploss_ctc_loss_fused.restype = ctypes.c_int
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, cudnn {torch.backends.cudnn.version()}")
    print()
    print("| case | ploss fused ms | torch ms | torch cudnn ms | loss rel Δ | grad max abs Δ / max abs | "
          "torch's grad, the same |")
    print("|---|---|---|---|---|---|---|")
    for (T, N, C, S, dtype) in CASES:
        dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
        g = torch.Generator(device="cpu").manual_seed(0)
        lp = torch.randn(T, N, C, generator=g).log_softmax(2).to(dev, dt)
        g1 = torch.Generator(device="cpu").manual_seed(1)
        tl = torch.randint(S // 2, S + 1, (N,), generator=g1)
        il = torch.randint(int(0.8 * T), T + 1, (N,), generator=g1)
        tgt = torch.randint(1, C, (N, S), generator=g1)
        for n in range(N):  # a repeat every 7th label
            for i in range(6, S, 7):
                tgt[n, i] = tgt[n, i - 1]
        tgt_d, il_d, tl_d = tgt.to(dev), il.to(dev), tl.to(dev)
        loss = torch.empty((), dtype=torch.float32, device=dev)
        grad = torch.empty_like(lp)
        o = CtcOpts()
        L.ploss_ctc_loss_opts_init(ctypes.byref(o))
        descs = [dl(p, t) for t in (lp, tgt_d, il_d, tl_d, loss, grad)]

        def run_ploss():
            p.check(L.ploss_ctc_loss_fused(p.ctx, *[ctypes.byref(d) for d, _ in descs[:4]], ctypes.byref(o),
                                           ctypes.byref(descs[4][0]), ctypes.byref(descs[5][0])),
                    "ploss_ctc_loss_fused")

        x = lp.detach().clone().requires_grad_(True)

        def run_torch():  # aten's CUDA CTC takes f32/f64: a 16-bit input goes through an upcast
            x.grad = None
            F.ctc_loss(x if dt == torch.float32 else x.float(), tgt_d, il_d, tl_d).backward()

        t_ploss = timed(run_ploss, args.runs, args.warmup)
        with torch.backends.cudnn.flags(enabled=False):
            t_torch = timed(run_torch, args.runs, args.warmup)
            run_torch()
        ref_loss = F.ctc_loss(x.detach().double(), tgt_d, il_d, tl_d).item()
        run_ploss()
        torch.cuda.synchronize()
        # the reference gradient in f64 (autograd through aten's kernels)
        xr = lp.detach().double().requires_grad_(True)
        F.ctc_loss(xr, tgt_d, il_d, tl_d).backward()
        dloss = abs(loss.item() - ref_loss) / abs(ref_loss)
        dgrad = ((grad.double() - xr.grad).abs().max() / xr.grad.abs().max()).item()
        tgrad = ((x.grad.double() - xr.grad).abs().max() / xr.grad.abs().max()).item()  # aten's, in the input's dtype
        t_cudnn = "—"
        if dtype == "f32" and S <= 256:
            # cuDNN's CTC (aten picks it for f32, blank 0, every input length T, target lengths
            # <= 256, concatenated int32 targets on the host, lengths as lists); the grad_fn
            # says whether it was taken
            xc = lp.detach().clone().requires_grad_(True)
            flat = torch.cat([tgt[n, :tl[n]] for n in range(N)]).to(torch.int32).cpu()
            full, tls = [T] * N, [int(v) for v in tl]

            def run_cudnn():
                xc.grad = None
                out = F.ctc_loss(xc, flat, full, tls)
                out.backward()
                return out

            try:
                taken = graph_has(run_cudnn().grad_fn, "Cudnn")
                t = timed(run_cudnn, args.runs, args.warmup)
                t_cudnn = f"{t:.3f} (all lengths T)" if taken else f"— (aten did not take cuDNN: {t:.3f})"
            except RuntimeError as e:
                t_cudnn = f"— (cuDNN refused: {str(e).splitlines()[0][:60]})"
        print(f"| T={T} N={N} C={C} S≤{S} {dtype} | {t_ploss:.3f} | {t_torch:.3f} | {t_cudnn} | {dloss:.2e} | "
              f"{dgrad:.2e} | {tgrad:.2e} |")
    L.ploss_ctx_destroy(p.ctx)


if __name__ == "__main__":
    main()
