#!/usr/bin/env python3
"""Merge the JSON lines of bench/torch_bench.py and bench/bench.lua into bench/RESULTS.md.

    python3 bench/report.py --torch torch.jsonl --ploss ploss.jsonl [--cases bench/cases.json]
                            [--command "the command that made them"] [--out RESULTS.md]

One row per case: ploss fused ms, ploss forward-then-backward ms, PyTorch eager ms,
torch.compile ms, Liger-Kernel's cross entropy ms and its time over ploss fused ("n/a"
where it did not run: not a 2-D cross-entropy case, a CPU run, or liger_kernel missing),
the floor (bytes the pass must move: read the logits and the labels
once, write the gradient once, over the copy bandwidth measured in the same run), ploss as
a percentage of the floor (floor / ploss time), peak extra memory over the input size for
ploss / eager / compile / Liger, the relative difference of ploss's loss (and gradient checksums)
from PyTorch's float64 reference on the same inputs, and the issue's target with
met / missed.  A row whose loss or gradient checksums differ from the reference by more
than the dtype's tolerance is marked WRONG and never counts as met.

The fused linear + cross-entropy cases (LINEAR_LOSSES: hidden and weight, an LM head's
loss) get a table of their own after the main one: ploss fused and forward-then-backward,
eager, torch.compile, Liger-Kernel's fused linear cross entropy, Cut Cross-Entropy, the
GEMM floor (the three products, timed with torch.matmul in the same run: torch_bench.py's
`gemm3` record), ploss ÷ floor, peak extra memory beyond the two gradients, the difference
from the float64 reference, and the targets target_ms, target_gemm_x (× the GEMM floor)
and target_extra_gb.

Losses of several embedding inputs (cases with "inputs", the pairs shape: triplet margin,
batch-hard triplet, InfoNCE, ArcFace's embeddings and class centres): "input" is all the
embedding inputs together, the floor reads
them and the labels once and writes one gradient per input, and for the GEMM-bound ones
(FLOPS below) the floor is the larger of that and the FLOP floor: their minimum FLOPs at the
rate torch.matmul reached on the case's operands in the same run (the `gemm` record of
torch_bench.py).  Their gradients are checked per input as well as summed.
A torch without torch.compile (Debian's 1.13 on the CPU test) gives n/a in the compile
columns.

Standard library only (runs on the GPU machine and here).
"""
import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Relative tolerance of ploss against the float64 reference (same inputs), per input dtype.
# The kernels accumulate in fp32 (f64 for f64), so the loss lands far below these; the
# gradient checksums of f16/bf16 are compared with those of the reference gradient rounded
# to the input dtype, so only elements whose rounding went the other way differ.
LOSS_TOL = {"f64": 1e-9, "f32": 1e-5, "bf16": 1e-4, "f16": 1e-4}
GRAD_TOL = {"f64": 1e-9, "f32": 1e-5, "bf16": 1e-3, "f16": 1e-4}
# The least FLOPs of a fused forward + backward of the GEMM-bound losses of several inputs
# (N rows of D features): the batch-hard triplet loss mines the N×N distances, one Gram
# product X·Xᵀ (2·N²·D; its symmetry is not counted, a GEMM computes the whole product; the
# mining and the gradient are O(N²) and O(N·D)); InfoNCE forms S = U·Vᵀ and the gradient
# products G·V and Gᵀ·U (6·N²·D; recomputing S for the backward, as ploss does, is 8·N²·D).
# ArcFace (N×D embeddings against C×D class centres) forms the N×C cosines X̂·Ŵᵀ and the
# gradient products G·Ŵ and Gᵀ·X̂ (6·N·C·D; ploss recomputes the tiles for backward, 8·N·C·D).
# Each takes (N, D, C), C the rows of the last input (N for the losses of N×D inputs only).
FLOPS = {"batch_hard_triplet": lambda n, d, c: 2.0 * n * n * d,
         "info_nce": lambda n, d, c: 6.0 * n * n * d,
         "arc_face": lambda n, d, c: 6.0 * n * c * d,
         "am_softmax": lambda n, d, c: 6.0 * n * c * d}
# The fused linear + cross-entropy losses (hidden BT×H and weight V×H, labels): their own
# table, "Fused linear + cross-entropy", against the GEMM floor (the `gemm3` record of
# torch_bench.py: the three products logits = h·Wᵀ, G·W and Gᵀ·h timed with torch.matmul)
# instead of the bandwidth floor; their memory is counted beyond the two gradients.
LINEAR_LOSSES = ("linear_cross_entropy",)
# Their gradient tolerance: every 16-bit implementation (eager PyTorch too) rounds the
# logits to the input dtype before the softmax, while the reference's gradient is that of the
# unrounded logits, so their gradient checksums differ from the reference's by a few 1e-3
# (eager's own Δ is in each case's details); f32 keeps the common tolerance.
LINEAR_GRAD_TOL = {"f64": 1e-9, "f32": 1e-5, "bf16": 1e-2, "f16": 1e-2}
# their peers in torch_bench.py's records (impl -> column name), in column order
LINEAR_PEERS = {"liger_flce": "Liger FLCE", "cce": "CCE"}
# Where the reference's sum(g·x) is below this share of its Cauchy–Schwarz bound
# sqrt(sum g² · sum x²) (g nearly orthogonal to x, as for InfoNCE's normalised inputs, where
# it is 0 but for rounding), its difference is measured against this share of the bound.
DOT_FLOOR = 1e-3
# A memory target "<= k x input" allows this much beyond k x input (the loss scalar and
# O(rows) bookkeeping; the allocator rounds each block to 256 B).
MEM_SLACK_BYTES = 1 << 20


def read_jsonl(path):
    recs = []
    if not path or not os.path.exists(path):
        return recs
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError as e:
                recs.append({"kind": "corrupt", "line": n, "error": str(e)})
    return recs


def rel(a, b):
    if a is None or b is None:
        return None
    if isinstance(a, str) or isinstance(b, str):
        return None
    if math.isnan(a) or math.isnan(b):
        return float("nan")
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(b), 1e-300)


def dot_rel(a, b, gsq_ref, xsq):
    """Relative difference of sum(g·x) a from the reference b: against |b|, or against
    DOT_FLOOR × sqrt(gsq_ref · xsq) when |b| is below that (only where sum(x²) is known)."""
    if xsq is None or gsq_ref is None or isinstance(xsq, str) or isinstance(gsq_ref, str):
        return rel(a, b)
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return None
    if math.isnan(a) or math.isnan(b):
        return float("nan")
    if a == b:
        return 0.0
    scale = max(abs(b), DOT_FLOOR * math.sqrt(max(gsq_ref, 0.0) * max(xsq, 0.0)))
    return abs(a - b) / max(scale, 1e-300)


def grad_delta(r, ref, rounded):
    """The larger relative difference of r's gradient checksums from the reference's: sum(g²)
    and sum(g·x), summed over the inputs and (several inputs) of each input; None when
    neither has them, NaN when one is NaN.  rounded: against the reference gradient rounded
    to the input dtype."""
    sfx = "_rounded" if rounded else ""
    ds = [rel(r.get("grad_sq"), ref.get("grad_sq" + sfx)),
          dot_rel(r.get("grad_dot_x"), ref.get("grad_dot_x" + sfx), ref.get("grad_sq" + sfx), ref.get("x_sq"))]
    rs, rd = r.get("grad_sq_inputs"), r.get("grad_dot_x_inputs")
    fs, fd, fx = ref.get("grad_sq_inputs" + sfx), ref.get("grad_dot_x_inputs" + sfx), ref.get("x_sq_inputs")
    if isinstance(rs, list) and isinstance(fs, list) and len(rs) == len(fs):
        ds += [rel(a, b) for a, b in zip(rs, fs)]
        if isinstance(rd, list) and isinstance(fd, list) and len(rd) == len(fd):
            xs = fx if isinstance(fx, list) and len(fx) == len(fd) else [None] * len(fd)
            ds += [dot_rel(a, b, g, x) for a, b, g, x in zip(rd, fd, fs, xs)]
    ds = [d for d in ds if d is not None]
    if not ds:
        return None
    if any(math.isnan(d) for d in ds):
        return float("nan")
    return max(ds)


def fmt_ms(v):
    if v is None:
        return "—"
    if v < 0.1:  # latency cases: keep two significant digits
        return f"{v:.4f}"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def fmt_target_ms(v):
    return f"{v:.3f}" if v < 0.1 else f"{v:.2f}"


def fmt_x(v):
    return "—" if v is None else f"{v:.2f}×"


def fmt_rel(v):
    if v is None:
        return "—"
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    return "0" if v == 0 else f"{v:.1e}"


def fmt_bytes(v):
    if v is None:
        return "—"
    if abs(v) >= 1 << 30:
        return f"{v / (1 << 30):.2f} GiB"
    if abs(v) >= 1 << 20:
        return f"{v / (1 << 20):.1f} MiB"
    if abs(v) >= 1 << 10:
        return f"{v / (1 << 10):.1f} KiB"
    return f"{v} B"


def fmt_bw(gbps):
    return f"{gbps / 1000:.2f} TB/s" if gbps >= 100 else f"{gbps:.2f} GB/s"


def index(recs, kind):
    out = {}
    for r in recs:
        if r.get("kind") == kind:
            key = (r.get("case"), r.get("impl") or r.get("mode"))
            out[key] = r
    return out


def first(recs, kind):
    for r in recs:
        if r.get("kind") == kind:
            return r
    return None


def status_of(wrong, errors, ploss_ran, skip, same_inputs, tparts, missed, small):
    """A case's status: WRONG (a result off the reference), ERROR, ploss not run (with the
    skip record's reason), no check (the two sides' inputs differ), then against the
    targets `tparts`: ok (none), missed (the `missed` list) or met."""
    if wrong:
        status = "**WRONG**: " + "; ".join(wrong + errors)[:300]
    elif errors:
        status = "**ERROR**: " + "; ".join(errors)[:300]
    elif not ploss_ran:
        status = "ploss not run" + (f": {skip.get('reason')}" if skip else "")
    elif not same_inputs:
        status = "no check (inputs differ)" + ("" if not tparts else "; " + ("met" if not missed else "missed"))
    elif not tparts:
        status = "ok (no target)"
    elif missed:
        status = "missed: " + ", ".join(missed)
    else:
        status = "**met**"
    if small and tparts:
        status += " (small run: targets not meaningful)"
    return status


def build(args):
    trecs, precs = read_jsonl(args.torch), read_jsonl(args.ploss)
    with open(args.cases) as f:
        cases = json.load(f)["cases"]
    tenv, penv = first(trecs, "env") or {}, first(precs, "env") or {}
    tbw = next((r for r in trecs if r.get("kind") == "copy_bw" and r.get("gbps")), None)
    pbw = next((r for r in precs if r.get("kind") == "copy_bw" and r.get("gbps")), None)
    bw = (tbw or pbw or {}).get("gbps")  # GB/s, bytes read + written
    torch_runs, torch_ref = index(trecs, "torch"), index(trecs, "ref")
    gemms = index(trecs, "gemm")
    gemm_refs, sorts = index(trecs, "gemm3"), index(trecs, "sort")  # the issue targets' references
    tin, pin = index(trecs, "inputs"), index(precs, "inputs")
    pruns = index(precs, "ploss")
    tskip, pskip = index(trecs, "skip"), index(precs, "skip")
    # a torch without torch.compile (Debian's 1.13 on the CPU test): its column is n/a
    no_compile = any(r.get("kind") == "warning" and "has no torch.compile" in str(r.get("message"))
                     for r in trecs)

    L = []
    L.append("# ploss benchmark results")
    L.append("")
    L.append("Generated by `bench/report.py` from the JSON lines of `bench/torch_bench.py` and "
             "`bench/bench.lua` (one run). Method: `bench/README.md`.")
    L.append("")
    gpu = tenv.get("gpu") or "?"
    L.append(f"- **Card**: {gpu}" + (f" ({tenv.get('sm_count')} SMs, L2 {fmt_bytes(tenv.get('l2_bytes'))}, "
                                      f"{fmt_bytes(tenv.get('gpu_mem_bytes'))})" if tenv.get("sm_count") else ""))
    if tenv.get("nvidia_smi"):
        L.append(f"- **nvidia-smi** (name, driver, max SM clock, max memory clock): {tenv['nvidia_smi']}")
    drv = penv.get("cuda_driver_version")
    L.append(f"- **CUDA**: driver API {drv // 1000}.{drv % 1000 // 10}" if drv else "- **CUDA**: driver API ?")
    L[-1] += (f", ploss's cudart {penv['cudart_version'] // 1000}.{penv['cudart_version'] % 1000 // 10}"
              if penv.get("cudart_version") else "")
    L[-1] += f", PyTorch {tenv.get('torch', '?')} (CUDA {tenv.get('torch_cuda', '?')})"
    L.append(f"- **Date**: {tenv.get('date_utc') or penv.get('date_utc') or '?'}")
    if tenv.get("liger"):
        L.append(f"- **Liger-Kernel**: {tenv['liger']} (`liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction`, "
                 "2-D cross-entropy cases on the GPU; the logits are restored before each run, untimed)")
    elif tenv:
        L.append(f"- **Liger-Kernel**: not available ({tenv.get('liger_error') or 'not recorded by this torch_bench.py'})")
    for name, p in (tenv.get("linear_peers") or {}).items():  # the order of LINEAR_PEERS
        label = LINEAR_PEERS.get(name, name)
        L.append(f"- **{label}** (fused linear cross-entropy): " +
                 (f"{p.get('version')} (`{p.get('api')}`)" if not p.get("error")
                  else f"not available ({p['error']})"))
    if args.command:
        L.append(f"- **Command**: `{args.command.strip()}`")
    if bw:
        src = "torch `dst.copy_(src)`" if tbw else "cudaMemcpyAsync"
        b = (tbw or pbw)
        line = (f"- **Copy bandwidth** (bytes read + written / time, {fmt_bytes(b['bytes_copied'])} copied, "
                f"median of {b['runs']}, {src}): **{fmt_bw(bw)}**")
        if tbw and pbw:
            line += f"; cudaMemcpyAsync from LuaJIT: {fmt_bw(pbw['gbps'])}"
        L.append(line)
    else:
        L.append("- **Copy bandwidth**: not measured (no GPU in this run): the floor columns are empty")
    small = tenv.get("small") or penv.get("small")
    if small:
        L.append("- **--small run** (shapes shrunk to N ≤ 16, C ≤ 512, dims ≤ 16): a test of the harness, "
                 "not a measurement")
    if tenv.get("device", "").startswith("cpu") or penv.get("device") == "cpu":
        L.append("- **CPU run**: times are host wall-clock, memory columns only from ploss's counters")
    for r in trecs + precs:
        if r.get("kind") == "warning":
            L.append(f"- **WARNING** ({r.get('source')}): {r.get('message')}")
        if r.get("kind") == "corrupt":
            L.append(f"- **WARNING**: unreadable result line {r.get('line')}: {r.get('error')}")
    runs = penv.get("runs") or next((r.get("runs") for r in torch_runs.values() if r.get("runs")), None)
    L.append(f"- Timing: CUDA events around each run, median of {runs} runs after "
             f"{penv.get('warmup', '?')} warm-up runs; torch.compile mode "
             f"'{tenv.get('compile_mode', 'default')}', dynamic=False, compiled once per case.")
    L.append("")
    L.append("Columns: ms are medians. *Liger* = Liger-Kernel's cross entropy (forward + backward, "
             "as eager), *Liger ÷ ploss* = its time over ploss fused (above 1: ploss is faster); n/a where "
             "it did not run (the reason is in the case's details). *floor* = (input read + labels read + gradient written) / copy "
             "bandwidth. *% floor* = floor / ploss fused. *mem* = peak extra device memory over the "
             "input (logits) size; the gradient counts as extra (PyTorch allocates it in backward, "
             "ploss's caller allocates it), inputs do not; ploss in place: the extra bytes. "
             "Losses of several inputs: *input* is all the embedding inputs together, one gradient per input; "
             "for the GEMM-bound ones (batch-hard triplet 2·N²·D, InfoNCE 6·N²·D FLOPs) *floor* is the larger of "
             "the bytes' floor and the FLOPs at the rate torch.matmul reached on the case's operands in this run "
             "(marked ᶠ where the FLOPs bound it; the details give both). "
             "*loss Δ* = |ploss − ref| / |ref| with ref = the PyTorch composite in float64 on the same "
             "inputs; *grad Δ* = the larger relative difference of sum(g²) and sum(g·x) (for f16/bf16 against the "
             "reference gradient rounded to that dtype; several inputs: summed and per input; a sum(g·x) below "
             f"{DOT_FLOOR:g} of its bound sqrt(sum g²·sum x²), as for normalised inputs, against {DOT_FLOOR:g} of the bound). "
             f"Tolerances (loss / grad): " +
             ", ".join(f"{d} {LOSS_TOL[d]:.0e} / {GRAD_TOL[d]:.0e}" for d in ("f32", "bf16", "f16", "f64")) + ".")
    L.append("")
    hdr = ("| case | ploss fused | ploss fwd+bwd | eager | compile | Liger | Liger ÷ ploss | floor | % floor | "
           "mem ploss | mem ploss in place | mem eager | mem compile | mem Liger | loss Δ | grad Δ | target | "
           "status |")
    if any(c.get(k) is not None for c in cases for k in ("target_floor_x", "target_gemm_x", "target_sort_x",
                                                             "target_workspace_x", "target_workspace_mib",
                                                             "target_workspace_row_bytes", "target_vs_case")):
        L.append("Issue targets against a reference of the same run: *× floor* (ploss fused over the floor column), "
                 "*× GEMM(s)* (over the products alone, timed with torch.matmul on the case's operands: the batch-hard "
                 "triplet loss's X·Xᵀ, the three products of InfoNCE and the margin losses), *× sort* (over one torch.sort "
                 "of C·N·H·W float32 keys with their indices: CUB's radix sort of (key, index) pairs on CUDA), "
                 "*workspace* (ploss's own memory in the fused call beyond the outputs its caller allocates), "
                 "*× case* (over the named case's ploss fused time); each measure is in the case's details.")
        L.append("")
    L.append(hdr)
    L.append("|" + "|".join(["---"] * (hdr.count("|") - 1)) + "|")

    details, skipped, verdicts = [], [], []
    for c in cases:
        if c["loss"] in LINEAR_LOSSES or c.get("kind") == "ema":  # their own tables
            continue
        cid = c["id"]
        pf, pfb, pip = pruns.get((cid, "fused")), pruns.get((cid, "fwd_bwd")), pruns.get((cid, "inplace"))
        te, tc, ref = torch_runs.get((cid, "eager")), torch_runs.get((cid, "compile")), torch_ref.get((cid, "f64"))
        tl = torch_runs.get((cid, "liger"))
        tl_ran = bool(tl and tl.get("ms_median") is not None and not tl.get("error"))
        if not (pf or te or tc):
            why = []
            for s in (pskip.get((cid, None)), tskip.get((cid, None))):
                if s:
                    why.append(f"{s.get('source')}: {s.get('reason')}")
            err = [f"{r.get('source')} {r.get('mode') or r.get('impl')}: {r.get('error')}"
                   for r in (pruns.get((cid, "setup")),) if r]
            skipped.append(f"- `{cid}` (issue {c.get('issue')}): " + ("; ".join(why + err) or "not run"))
            continue
        inp = pin.get((cid, None)) or tin.get((cid, None)) or {}
        in_bytes = inp.get("input_bytes")
        tgt_bytes = inp.get("target_bytes")
        floor = mem_floor = flop_floor = flop_floor_f32 = flops = None
        if bw and in_bytes is not None and tgt_bytes is not None:
            floor = mem_floor = (2 * in_bytes + tgt_bytes) / (bw * 1e9) * 1e3
        gm = gemms.get((cid, "gemm"))
        run_dims = inp.get("shape") or c["shape"]
        shapes = inp.get("input_shapes") or (tin.get((cid, None)) or {}).get("input_shapes") or [run_dims]
        partial = float((c.get("opts") or {}).get("sample_rate", 1.0) or 1.0) < 1.0  # Partial FC: fewer FLOPs
        if c["loss"] in FLOPS and len(run_dims) == 2 and not partial:
            flops = FLOPS[c["loss"]](run_dims[0], run_dims[1], shapes[-1][0])
            if gm and gm.get("tflops"):
                flop_floor = flops / (gm["tflops"] * 1e12) * 1e3
            if gm and gm.get("f32_tflops"):
                flop_floor_f32 = flops / (gm["f32_tflops"] * 1e12) * 1e3
        flop_bound = bool(bw and flop_floor and (floor is None or flop_floor > floor))
        if flop_bound:
            floor = flop_floor
        fused_ms = pf.get("ms_median") if pf else None
        pct = f"{100 * floor / fused_ms:.0f} %" if floor and fused_ms else "—"

        def mem_ratio(r, key="peak_extra_bytes"):
            if not r or r.get(key) is None or not in_bytes:
                return None
            return r[key] / in_bytes

        # correctness against the float64 reference (same inputs only)
        same_inputs = (tin.get((cid, None)) or {}).get("generator") == "ploss"
        loss_d = grad_d = None
        wrong = []
        dt = c["dtype"]
        # gradients in a 16-bit dtype are compared with the reference rounded to that dtype
        rounded = dt in ("bf16", "f16") and ref is not None and "grad_sq_rounded" in ref
        if pf and ref and same_inputs and "error" not in ref:
            loss_d = rel(pf.get("loss"), ref.get("loss"))
            grad_d = grad_delta(pf, ref, rounded)
            if loss_d is None or math.isnan(loss_d) or loss_d > LOSS_TOL.get(dt, 1e-4):
                wrong.append(f"loss Δ {fmt_rel(loss_d)}")
            if grad_d is not None and (math.isnan(grad_d) or grad_d > GRAD_TOL.get(dt, 1e-3)):
                wrong.append(f"grad Δ {fmt_rel(grad_d)}")
            for other in (pfb, pip):  # the other modes must agree with the fused pass
                if other and other.get("loss") is not None:
                    d = rel(other.get("loss"), ref.get("loss"))
                    if d is None or math.isnan(d) or d > LOSS_TOL.get(dt, 1e-4):
                        wrong.append(f"{other['mode']} loss Δ {fmt_rel(d)}")
                    d = grad_delta(other, ref, rounded)
                    if d is not None and (math.isnan(d) or d > GRAD_TOL.get(dt, 1e-3)):
                        wrong.append(f"{other['mode']} grad Δ {fmt_rel(d)}")
        errors = [f"{r.get('mode') or r.get('impl')}: {r['error']}" for r in (pf, pfb, pip, te, tc, ref)
                  if r and r.get("error")]

        # target
        tparts, missed = [], []
        tms, tmem, tip = c.get("target_ms"), c.get("target_mem_x"), c.get("target_inplace_mib")
        if tms is not None:
            tparts.append(f"≤ {fmt_target_ms(tms)} ms")
            if fused_ms is None or fused_ms > tms:
                missed.append(f"time {fmt_ms(fused_ms)} ms" + (f" = {fused_ms / tms:.1f}× target" if fused_ms else ""))
        if tmem is not None:
            tparts.append(f"≤ {tmem:g}×")
            pe = pf.get("peak_extra_bytes") if pf else None
            if pe is None or in_bytes is None or pe > tmem * in_bytes + MEM_SLACK_BYTES:
                missed.append(f"memory {fmt_x(mem_ratio(pf))}")
        if tip is not None:
            tparts.append(f"in place ≤ {tip:g} MiB")
            pe = pip.get("peak_extra_bytes") if pip else None
            if pe is None or pe > tip * (1 << 20):
                missed.append(f"in place {fmt_bytes(pe)}")
        # the issue targets stated against a reference measured in the same run
        gref, sref = gemm_refs.get((cid, "gemm3")), sorts.get((cid, "sort"))
        gref_ms = gref.get("ms_median") if gref and not gref.get("error") else None
        sref_ms = sref.get("ms_median") if sref and not sref.get("error") else None
        gemm_name = f"GEMM{'s' if (gref or {}).get('products', 3) > 1 else ''}"
        for key, ref_ms, name, shown in (("target_floor_x", floor, "floor", "floor"),
                                         ("target_gemm_x", gref_ms, "GEMM", gemm_name),
                                         ("target_sort_x", sref_ms, "sort", "sort")):
            x = c.get(key)
            if x is None:
                continue
            tparts.append(f"≤ {x:g}× {shown}")
            if fused_ms is None or ref_ms is None:
                missed.append(f"÷ {name} not measured")
            elif fused_ms > x * ref_ms:
                missed.append(f"{fused_ms / ref_ms:.2f}× {name}")
        ws = pf.get("workspace_peak_bytes") if pf else None
        twx, twm, twr = c.get("target_workspace_x"), c.get("target_workspace_mib"), c.get("target_workspace_row_bytes")
        if twx is not None:
            tparts.append(f"workspace ≤ {twx:g}× input")
            if ws is None or in_bytes is None or ws > twx * in_bytes + MEM_SLACK_BYTES:
                missed.append(f"workspace {fmt_x(ws / in_bytes if ws is not None and in_bytes else None)}")
        if twm is not None:
            tparts.append(f"workspace ≤ {twm:g} MiB")
            if ws is None or ws > twm * (1 << 20):
                missed.append(f"workspace {fmt_bytes(ws)}")
        if twr is not None:
            rows_n = run_dims[0] if run_dims else None
            tparts.append(f"workspace ≤ {twr:g} B/row (O(N))")
            if ws is None or not rows_n or ws > twr * rows_n + MEM_SLACK_BYTES:
                missed.append(f"workspace {fmt_bytes(ws)}" + (f" = {ws / rows_n:.0f} B/row" if ws is not None and rows_n else ""))
        vs_id, tvx = c.get("target_vs_case"), c.get("target_vs_x")
        vs_pf = pruns.get((vs_id, "fused")) if vs_id else None
        vs_ms = vs_pf.get("ms_median") if vs_pf and not vs_pf.get("error") else None
        if vs_id and tvx is not None:
            tparts.append(f"≤ {tvx:g}× {vs_id}")
            if fused_ms is None or vs_ms is None:
                missed.append(f"{vs_id} not run")
            elif fused_ms > tvx * vs_ms:
                missed.append(f"{fused_ms / vs_ms:.2f}× {vs_id}")
        status = status_of(wrong, errors, pf, pskip.get((cid, None)), same_inputs, tparts, missed, small)
        verdicts.append((cid, status))

        ip_mem = fmt_bytes(pip.get("peak_extra_bytes")) if pip and pip.get("peak_extra_bytes") is not None else "—"
        if tl_ran:
            l_ms = fmt_ms(tl["ms_median"])
            l_ratio = fmt_x(tl["ms_median"] / fused_ms) if fused_ms else "—"
            l_mem = fmt_x(mem_ratio(tl))
        else:
            l_ms = "error" if tl and tl.get("error") else "n/a"
            l_ratio = l_mem = "n/a"
        L.append(f"| {cid} | {fmt_ms(fused_ms)} | {fmt_ms(pfb.get('ms_median') if pfb else None)} | "
                 f"{fmt_ms(te.get('ms_median') if te else None)} | {fmt_ms(tc.get('ms_median')) if tc else ('n/a' if no_compile else '—')} | "
                 f"{l_ms} | {l_ratio} | "
                 f"{fmt_ms(floor)}{'ᶠ' if flop_bound else ''} | {pct} | {fmt_x(mem_ratio(pf))} | {ip_mem} | {fmt_x(mem_ratio(te))} | "
                 f"{fmt_x(mem_ratio(tc)) if tc or not no_compile else 'n/a'} | {l_mem} | {fmt_rel(loss_d)} | {fmt_rel(grad_d)} | "
                 f"{', '.join(tparts) or '—'} | {status} |")

        n_labels = (tgt_bytes // 8) if (c["target"] == "index" and tgt_bytes) else None
        run_shape = inp.get("shape")
        desc = f"shape {c['shape']}"
        if run_shape and list(run_shape) != list(c["shape"]):
            desc += f" (run as {run_shape})"
        desc += f", {c['dtype']}, {c['loss']} {json.dumps(c.get('opts', {}))}, target {c['target']}"
        if c.get("input", "normal") != "normal":
            desc += f", input {c['input']} of the normal draw"
        if n_labels and inp.get("ignored") is not None:
            desc += f" ({inp['ignored']} of {n_labels} labels ignored)"
        if c.get("inputs"):
            names = (pin.get((cid, None)) or {}).get("input_names")
            if c.get("input_shapes"):
                desc += (f"; {c['inputs']} inputs of shapes {c['input_shapes']}"
                         + (f" (run as {shapes})" if small and shapes != c["input_shapes"] else ""))
            else:
                desc += f"; {c['inputs']} embedding input(s) of that shape"
            desc += f" ({', '.join(names)})" if names else ""
            if inp.get("classes"):
                desc += f", labels i mod {inp['classes']}"
        desc += f"; input {fmt_bytes(in_bytes)}, labels {fmt_bytes(tgt_bytes)}"
        if c.get("anchor"):
            desc += f"; issue anchor: {c['anchor']}"
        d = [f"### {cid}", "", desc, ""]
        d.append("| run | median ms | p10–p90 ms | peak extra | of which workspace | cudaMemGetInfo Δ | loss (f64 print) | sum g² | sum g·x |")
        d.append("|---|---|---|---|---|---|---|---|---|")
        for name, r in (("ploss fused", pf), ("ploss fwd+bwd", pfb), ("ploss fused in place", pip),
                        ("torch eager", te), ("torch.compile", tc), ("Liger-Kernel", tl),
                        ("torch float64 reference", ref)):
            if not r or (r is tl and not r.get("error") and not tl_ran):
                continue
            if r.get("error"):
                d.append(f"| {name} | error: {r['error'][:200]} | | | | | | | |")
                continue
            spread = (f"{fmt_ms(r.get('ms_p10'))}–{fmt_ms(r.get('ms_p90'))}" if r.get("ms_p10") is not None else "—")
            d.append(f"| {name} | {fmt_ms(r.get('ms_median'))} | {spread} | {fmt_bytes(r.get('peak_extra_bytes'))} | "
                     f"{fmt_bytes(r.get('workspace_peak_bytes'))} | {fmt_bytes(r.get('meminfo_delta_bytes'))} | "
                     f"{r.get('loss')!r} | {r.get('grad_sq')!r} | {r.get('grad_dot_x')!r} |")
        if c.get("inputs"):
            per = []
            for name, r in (("ploss fused", pf), ("ploss fwd+bwd", pfb), ("torch eager", te),
                            ("torch.compile", tc), ("torch float64 reference", ref)):
                if r and isinstance(r.get("grad_sq_inputs"), list):
                    per.append(f"{name}: " + ", ".join(
                        f"({a!r}, {b!r})" for a, b in zip(r["grad_sq_inputs"], r.get("grad_dot_x_inputs") or [])))
            if per:
                d.append("")
                d.append("Per input (argument order), (sum g², sum g·x): " + "; ".join(per))
            if mem_floor is not None or flops is not None:
                d.append("")
                line = (f"Floor: bytes {fmt_bytes(2 * in_bytes + tgt_bytes)} at the copy bandwidth = {fmt_ms(mem_floor)} ms"
                        if mem_floor is not None else "Floor: bytes not timed (no copy bandwidth)")
                if flops is not None:
                    line += f"; FLOPs {flops / 1e9:.4g} GFLOP"
                    if gm and gm.get("tflops"):
                        line += (f" at {gm['tflops']:.4g} TFLOP/s (torch.matmul {gm.get('m')}×{gm.get('k')} · "
                                 f"{gm.get('k')}×{gm.get('n')} {gm.get('gemm_dtype')}) = {fmt_ms(flop_floor)} ms")
                        if gm.get("f32_tflops") and gm.get("gemm_dtype") != "float32":
                            line += (f"; at the float32 rate (no TF32), {gm['f32_tflops']:.4g} TFLOP/s: "
                                     f"{fmt_ms(flop_floor_f32)} ms")
                    elif gm and gm.get("error"):
                        line += f" (GEMM rate not measured: {gm['error'][:200]})"
                    else:
                        line += " (GEMM rate not measured)"
                    line += "; the table's floor: " + ("the FLOPs" if flop_bound else "the bytes")
                d.append(line)
        if gref:
            d.append("")
            if gref.get("error"):
                d.append(f"GEMM reference: not measured ({gref['error'][:200]})")
            else:
                prods = ("X·Xᵀ alone" if gref.get("products") == 1 else
                         f"the three products (S = A·Bᵀ {fmt_ms(gref.get('ms_logits'))} ms, G·B "
                         f"{fmt_ms(gref.get('ms_grad_hidden'))} ms, Gᵀ·A {fmt_ms(gref.get('ms_grad_weight'))} ms)")
                d.append(f"GEMM reference (the issue target's): {prods} with torch.matmul, {gref.get('gemm_dtype')} in "
                         f"and out, back to back, median of {gref.get('runs')}: **{fmt_ms(gref_ms)} ms** "
                         f"({(gref.get('flops') or 0) / 1e12:.4g} TFLOP at {(gref.get('tflops') or 0):.4g} TFLOP/s); "
                         f"ploss fused ÷ GEMM = " + (f"{fused_ms / gref_ms:.3f}×" if fused_ms and gref_ms else "—") + ".")
        if sref:
            d.append("")
            if sref.get("error"):
                d.append(f"Sort reference: not measured ({sref['error'][:200]})")
            else:
                d.append(f"Sort reference (the issue target's): `{sref.get('api')}` of {sref.get('keys')} float32 keys "
                         f"(C·N·H·W) — on CUDA PyTorch runs CUB's radix sort of (key, index) pairs "
                         f"(cub::DeviceRadixSort::SortPairs) for it — median of {sref.get('runs')}: "
                         f"**{fmt_ms(sref_ms)} ms** (p10–p90 {fmt_ms(sref.get('ms_p10'))}–{fmt_ms(sref.get('ms_p90'))}); "
                         f"ploss fused ÷ sort = " + (f"{fused_ms / sref_ms:.3f}×" if fused_ms and sref_ms else "—") + ".")
        if pf and (twx is not None or twm is not None or twr is not None):
            d.append("")
            d.append(f"ploss's own workspace in the fused call (beyond the outputs its caller allocates: gradients, "
                     f"loss): {fmt_bytes(ws)}" + (f" = {ws / in_bytes:.2f}× the input" if ws is not None and in_bytes else "")
                     + (f", {ws / run_dims[0]:.0f} B per row" if ws is not None and twr is not None and run_dims else ""))
        if vs_id:
            d.append("")
            d.append(f"Against `{vs_id}` (ploss fused in this run: {fmt_ms(vs_ms)} ms): ploss fused ÷ it = "
                     + (f"{fused_ms / vs_ms:.3f}×" if fused_ms and vs_ms else "—") + ".")
        if tc and tc.get("compile_s") is not None:
            d.append("")
            d.append(f"torch.compile warm-up (first forward + backward, compiling both): {tc['compile_s']:.1f} s")
        if tl and not tl_ran and not tl.get("error"):
            d.append("")
            d.append(f"Liger-Kernel: n/a ({tl.get('reason') or 'not run'})")
        elif tl_ran:
            d.append("")
            line = f"Liger-Kernel: first call (Triton JIT) {tl.get('jit_s', 0):.1f} s"
            if ref and "error" not in ref:
                l_d = rel(tl.get("loss"), ref.get("loss"))
                l_g = grad_delta(tl, ref, rounded)
                line += (f"; against the float64 reference: loss Δ {fmt_rel(l_d)} (its loss is "
                         f"{tl.get('loss_dtype', '?')}), grad Δ {fmt_rel(l_g)} (not part of the status)")
            if tl.get("grad_is_logits") is not None:
                line += ("; x.grad is the logits' own memory" if tl["grad_is_logits"]
                         else "; x.grad is a separate tensor")
            d.append(line)
        if pf and pf.get("unused_opts"):
            d.append("")
            d.append(f"Options the ploss criterion does not know (not applied): {pf['unused_opts']}")
        d.append("")
        details.extend(d)

    L.append("")
    lin = [c for c in cases if c["loss"] in LINEAR_LOSSES]
    if lin:
        linear_section(lin, L, details, skipped, verdicts, trecs, precs, small)
    ema = [c for c in cases if c.get("kind") == "ema"]
    if ema:
        ema_section(ema, L, details, skipped, verdicts, trecs, precs, small, bw)
    if skipped:
        L.append("## Not run")
        L.append("")
        L.extend(skipped)
        L.append("")
    compile_total = sum(r.get("compile_s") or 0 for r in torch_runs.values())
    jit_total = sum(r.get("jit_s") or 0 for r in torch_runs.values() if r.get("impl") == "liger")
    jit_linear = sum(r.get("jit_s") or 0 for r in torch_runs.values() if r.get("impl") in LINEAR_PEERS)
    tdone, pdone = first(trecs, "done"), first(precs, "done")
    L.append("## Run time")
    L.append("")
    L.append(f"- PyTorch side: {tdone['wall_s']:.0f} s, of which torch.compile warm-up {compile_total:.0f} s"
             + (f", Liger's first calls {jit_total:.0f} s" if jit_total else "")
             + (f", the fused linear peers' first calls (Triton JIT, autotuning) {jit_linear:.0f} s"
                if jit_linear else "")
             if tdone else "- PyTorch side: did not finish (no 'done' record)")
    L.append(f"- ploss side: {pdone['wall_s']:.0f} s" if pdone else "- ploss side: did not finish (no 'done' record)")
    L.append("")
    L.append("## Details per case")
    L.append("")
    L.extend(details)
    return "\n".join(L) + "\n", verdicts



def fmt_gb(v):
    """Bytes in decimal units (the issue states its memory target in GB)."""
    if v is None:
        return "—"
    if abs(v) >= 1e9:
        return f"{v / 1e9:.2f} GB"
    if abs(v) >= 1e6:
        return f"{v / 1e6:.1f} MB"
    return f"{v / 1e3:.1f} kB"


def linear_section(cases, L, details, skipped, verdicts, trecs, precs, small):
    """The table "Fused linear + cross-entropy" (appended to L), its cases' details (to
    details), the cases not run (to skipped) and their verdicts."""
    torch_runs, torch_ref = index(trecs, "torch"), index(trecs, "ref")
    floors = index(trecs, "gemm3")
    tin, pin = index(trecs, "inputs"), index(precs, "inputs")
    pruns = index(precs, "ploss")
    tskip, pskip = index(trecs, "skip"), index(precs, "skip")
    no_compile = any(r.get("kind") == "warning" and "has no torch.compile" in str(r.get("message"))
                     for r in trecs)
    rows, det = [], []
    for c in cases:
        cid = c["id"]
        pf, pfb = pruns.get((cid, "fused")), pruns.get((cid, "fwd_bwd"))
        te, tc, ref = torch_runs.get((cid, "eager")), torch_runs.get((cid, "compile")), torch_ref.get((cid, "f64"))
        peers = {k: torch_runs.get((cid, k)) for k in LINEAR_PEERS}
        fl = floors.get((cid, "gemm3"))
        if not (pf or pfb or te or tc):
            why = [f"{r.get('source')}: {r.get('reason')}" for r in (pskip.get((cid, None)), tskip.get((cid, None))) if r]
            err = [f"{r.get('source')} {r.get('mode') or r.get('impl')}: {r.get('error')}"
                   for r in (pruns.get((cid, "setup")),) if r]
            skipped.append(f"- `{cid}` (issue {c.get('issue')}): " + ("; ".join(why + err) or "not run"))
            continue
        inp = pin.get((cid, None)) or tin.get((cid, None)) or {}
        tinp = tin.get((cid, None)) or {}
        in_bytes = inp.get("input_bytes")  # hidden + weight = the two gradients' bytes
        shapes = inp.get("input_shapes") or tinp.get("input_shapes") or c.get("input_shapes")
        dt = c["dtype"]
        floor = fl.get("ms_median") if fl and not fl.get("error") else None
        fused_ms = pf.get("ms_median") if pf else None

        def ran(r):
            return bool(r and r.get("ms_median") is not None and not r.get("error"))

        def extra(r):
            """Peak extra memory beyond the gradients of hidden and weight."""
            if not r or r.get("peak_extra_bytes") is None or in_bytes is None:
                return None
            return r["peak_extra_bytes"] - in_bytes

        same_inputs = tinp.get("generator") == "ploss"
        rounded = dt in ("bf16", "f16") and ref is not None and "grad_sq_rounded" in ref
        ref_ok = bool(ref and "error" not in ref)

        def deltas(r):
            if not (r and ref_ok and r.get("loss") is not None):
                return None, None
            return rel(r.get("loss"), ref.get("loss")), grad_delta(r, ref, rounded)

        loss_d = grad_d = None
        wrong = []
        if pf and ref_ok and same_inputs:
            loss_d, grad_d = deltas(pf)
            for r in (pf, pfb):
                if not r or r.get("loss") is None:
                    continue
                ld, gd = deltas(r)
                tag = "" if r is pf else f"{r['mode']} "
                if ld is None or math.isnan(ld) or ld > LOSS_TOL.get(dt, 1e-4):
                    wrong.append(f"{tag}loss Δ {fmt_rel(ld)}")
                if gd is not None and (math.isnan(gd) or gd > LINEAR_GRAD_TOL.get(dt, 1e-2)):
                    wrong.append(f"{tag}grad Δ {fmt_rel(gd)}")
        errors = [f"{r.get('mode') or r.get('impl')}: {r['error']}" for r in (pf, pfb, te, tc, ref)
                  if r and r.get("error")]

        tparts, missed = [], []
        tms, tx, tgb = c.get("target_ms"), c.get("target_gemm_x"), c.get("target_extra_gb")
        if tms is not None:
            tparts.append(f"≤ {fmt_target_ms(tms)} ms")
            if fused_ms is None or fused_ms > tms:
                missed.append(f"time {fmt_ms(fused_ms)} ms" + (f" = {fused_ms / tms:.2f}× target" if fused_ms else ""))
        if tx is not None:
            tparts.append(f"≤ {tx:g}× floor")
            if fused_ms is None or floor is None:
                missed.append("÷ floor not measured")
            elif fused_ms > tx * floor:
                missed.append(f"{fused_ms / floor:.3f}× floor")
        if tgb is not None:
            tparts.append(f"extra ≤ {tgb:g} GB")
            e = extra(pf)
            if e is None or e > tgb * 1e9:
                missed.append(f"extra {fmt_gb(e)}")
        status = status_of(wrong, errors, pf, pskip.get((cid, None)), same_inputs, tparts, missed, small)
        verdicts.append((cid, status))

        def cell(r):
            if ran(r):
                return fmt_ms(r["ms_median"])
            return "error" if r and r.get("error") else "n/a"

        ratio = f"{fused_ms / floor:.3f}×" if fused_ms and floor else "—"
        pct = f"{100 * floor / fused_ms:.0f} %" if fused_ms and floor else "—"
        rows.append(f"| {cid} | {fmt_ms(fused_ms)} | {fmt_ms(pfb.get('ms_median') if pfb else None)} | "
                    f"{cell(te)} | {cell(tc) if tc or not no_compile else 'n/a'} | "
                    f"{cell(peers['liger_flce'])} | {cell(peers['cce'])} | {fmt_ms(floor)} | {ratio} | {pct} | "
                    f"{fmt_gb(extra(pf))} | {fmt_gb(extra(te)) if ran(te) else '—'} | "
                    f"{fmt_gb(extra(tc)) if ran(tc) else ('n/a' if no_compile else '—')} | "
                    f"{fmt_gb(extra(peers['liger_flce'])) if ran(peers['liger_flce']) else 'n/a'} | "
                    f"{fmt_gb(extra(peers['cce'])) if ran(peers['cce']) else 'n/a'} | "
                    f"{fmt_rel(loss_d)} | {fmt_rel(grad_d)} | {', '.join(tparts) or '—'} | {status} |")

        # details
        BT = shapes[0][0] if shapes else None
        desc = f"hidden × weight {shapes}" if shapes else f"shape {c['shape']}"
        if small and c.get("input_shapes") and shapes != c["input_shapes"]:
            desc += f" (the case: {c['input_shapes']})"
        desc += f", {dt}, {c['loss']} {json.dumps(c.get('opts', {}))}, labels class_index"
        if inp.get("ignored") is not None and BT:
            desc += f" ({inp['ignored']} of {BT} ignored)"
        if c.get("input_std"):
            desc += f"; hidden ~ N(0, {c['input_std'][0]}²), weight ~ N(0, {c['input_std'][1]}²)"
        tgt_bytes = inp.get("target_bytes")
        desc += f"; inputs {fmt_gb(in_bytes)} (= the two gradients), labels {fmt_gb(tgt_bytes)}"
        if shapes:
            desc += f"; the BT×V logits: {fmt_gb(2 * shapes[0][0] * shapes[1][0])} in bf16, " \
                    f"{fmt_gb(4 * shapes[0][0] * shapes[1][0])} in float32"
        if c.get("anchor"):
            desc += f"; issue: {c['anchor']}"
        d = [f"### {cid}", "", desc, ""]
        d.append("| run | median ms | p10–p90 ms | × ploss fused | peak extra | beyond the gradients | of which workspace | "
                 "cudaMemGetInfo Δ | loss (f64 print) | loss Δ | grad Δ | sum g² (hidden, weight) | sum g·x (hidden, weight) |")
        d.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, r in (("ploss fused", pf), ("ploss fwd+bwd", pfb), ("torch eager", te), ("torch.compile", tc),
                        ("Liger-Kernel FLCE", peers["liger_flce"]), ("Cut Cross-Entropy", peers["cce"]),
                        ("float64 reference", ref)):
            if not r or (r.get("reason") and not r.get("error")):
                continue
            if r.get("error"):
                d.append(f"| {name} | error: {r['error'][:200]} | | | | | | | | | | | |")
                continue
            ld, gd = deltas(r) if r is not ref and same_inputs else (None, None)
            spread = f"{fmt_ms(r.get('ms_p10'))}–{fmt_ms(r.get('ms_p90'))}" if r.get("ms_p10") is not None else "—"
            vs = (f"{r['ms_median'] / fused_ms:.2f}×" if r.get("ms_median") is not None and fused_ms
                  and r is not pf else "—")
            per = lambda k: ", ".join(f"{v!r}" for v in r[k]) if isinstance(r.get(k), list) else "—"
            d.append(f"| {name} | {fmt_ms(r.get('ms_median'))} | {spread} | {vs} | {fmt_gb(r.get('peak_extra_bytes'))} | "
                     f"{fmt_gb(extra(r)) if r is not ref else '—'} | {fmt_gb(r.get('workspace_peak_bytes'))} | "
                     f"{fmt_gb(r.get('meminfo_delta_bytes'))} | {r.get('loss')!r} | {fmt_rel(ld)} | {fmt_rel(gd)} | "
                     f"{per('grad_sq_inputs')} | {per('grad_dot_x_inputs')} |")
        d.append("")
        if fl and not fl.get("error"):
            d.append(f"GEMM floor: the three products with torch.matmul ({fl.get('gemm_dtype')} in and out, fp32 "
                     f"accumulation{', reduced-precision reductions off' if fl.get('reduced_precision_reduction') is False else ''}), "
                     f"back to back, median of {fl.get('runs')}: **{fmt_ms(floor)} ms** "
                     f"(p10–p90 {fmt_ms(fl.get('ms_p10'))}–{fmt_ms(fl.get('ms_p90'))}); logits h·Wᵀ "
                     f"{fmt_ms(fl.get('ms_logits'))} ms, G·W {fmt_ms(fl.get('ms_grad_hidden'))} ms, Gᵀ·h "
                     f"{fmt_ms(fl.get('ms_grad_weight'))} ms; 6·BT·V·H = {fl.get('flops', 0) / 1e12:.4g} TFLOP at "
                     f"{(fl.get('tflops') or 0):.4g} TFLOP/s.")
        elif fl:
            d.append(f"GEMM floor: not measured ({fl['error'][:200]})")
        else:
            d.append("GEMM floor: not measured (no gemm3 record)")
        if ref_ok:
            d.append("")
            d.append(f"Reference: the same loss in float64 on the upcast inputs (F.cross_entropy over h·Wᵀ, the "
                     f"weight and its gradient whole, the hidden rows in {ref.get('chunks')} chunk(s) of "
                     f"{ref.get('chunk_rows')} rows, each chunk's 'sum' over the labels not ignored); the gradients' "
                     f"checksums of 16-bit runs are compared with the reference gradients rounded to {dt}. sum(g·x) is "
                     f"the same for both inputs (both are sum(G ⊙ logits)).")
        if tc and tc.get("compile_s") is not None:
            d.append("")
            d.append(f"torch.compile warm-up (first forward + backward, compiling both): {tc['compile_s']:.1f} s")
        for k, label in LINEAR_PEERS.items():
            r = peers[k]
            if not r:
                continue
            d.append("")
            if r.get("reason"):
                d.append(f"{label}: n/a ({r['reason']})")
            elif r.get("error"):
                d.append(f"{label}: error ({r['error'][:300]})")
            else:
                d.append(f"{label}: {r.get('version', '?')}, `{r.get('api', '?')}`, first call (Triton JIT, "
                         f"autotuning) {r.get('jit_s', 0):.1f} s; its loss is {r.get('loss_dtype', '?')}; "
                         "loss Δ and grad Δ are for information (not part of the status)")
        if pf and pf.get("unused_opts"):
            d.append("")
            d.append(f"Options the ploss criterion does not know (not applied): {pf['unused_opts']}")
        d.append("")
        det.extend(d)

    if not rows:
        return
    L.append("## Fused linear + cross-entropy")
    L.append("")
    L.append("An LM head's loss, hidden (BT×H) · weight (V×H)ᵀ then cross-entropy, forward and backward to "
             "both inputs. ms are medians; *eager* / *compile*: `logits = hidden @ weight.T` in the inputs' dtype, "
             "`F.cross_entropy(logits.float(), labels)`, `loss.backward()` (the BT×V logits stored); *Liger FLCE*: "
             "Liger-Kernel's fused linear cross entropy; *CCE*: Apple's Cut Cross-Entropy "
             "(`cut_cross_entropy.linear_cross_entropy`, its defaults: gradient filtering on); n/a where a peer did "
             "not run (the reason is in the case's details). *GEMM floor* = the three products a fused pass cannot "
             "avoid (logits h·Wᵀ, G·W, Gᵀ·h: 6·BT·V·H FLOPs) timed with torch.matmul on the same operands in this "
             "run; *ploss ÷ floor* = ploss fused / GEMM floor (the target's measure), *% floor* = its inverse. "
             "*extra* = peak extra device memory beyond the gradients of hidden and weight (peak allocated during "
             "one forward + backward minus the inputs, minus the two gradients' bytes; decimal GB). "
             "*loss Δ*, *grad Δ*: ploss fused against the float64 reference (details); tolerances as above "
             "but the gradients' of 16-bit inputs, " + ", ".join(f"{d} {LINEAR_GRAD_TOL[d]:.0e}" for d in ("bf16", "f16")) +
             " (the reference's gradient is that of the unrounded logits; every 16-bit implementation, eager "
             "PyTorch's too, rounds them first).")
    L.append("")
    hdr = ("| case | ploss fused | ploss fwd+bwd | eager | compile | Liger FLCE | CCE | GEMM floor | ploss ÷ floor | "
           "% floor | extra ploss | extra eager | extra compile | extra Liger | extra CCE | loss Δ | grad Δ | target | "
           "status |")
    L.append(hdr)
    L.append("|" + "|".join(["---"] * (hdr.count("|") - 1)) + "|")
    L.extend(rows)
    L.append("")
    details.extend(det)


def ema_section(cases, L, details, skipped, verdicts, trecs, precs, small, bw):
    """The table "EMA of parameters" (kind "ema" cases, issue 20: not a loss): ploss's
    ema:update() against torch._foreach_lerp_ (and _foreach_mul_ + _foreach_add_), the floor
    of its bytes (read params and shadows, write shadows) at the copy bandwidth, ploss ÷ floor,
    the shadows after one update against the float64 reference, target_floor_x and status."""
    torch_runs, torch_ref = index(trecs, "torch"), index(trecs, "ref")
    tin, pin = index(trecs, "inputs"), index(precs, "inputs")
    pruns = index(precs, "ploss")
    tskip, pskip = index(trecs, "skip"), index(precs, "skip")
    rows, det = [], []
    for c in cases:
        cid = c["id"]
        pu = pruns.get((cid, "update"))
        peers = {k: torch_runs.get((cid, k)) for k in ("foreach_lerp", "foreach_mul_add")}
        ref = torch_ref.get((cid, "f64"))
        if not (pu or any(peers.values())):
            why = [f"{r.get('source')}: {r.get('reason')}" for r in (pskip.get((cid, None)), tskip.get((cid, None))) if r]
            skipped.append(f"- `{cid}` (issue {c.get('issue')}): " + ("; ".join(why) or "not run"))
            continue
        inp = pin.get((cid, None)) or tin.get((cid, None)) or {}
        nbytes = inp.get("input_bytes")  # the params' bytes (= the shadows')
        floor = 3 * nbytes / (bw * 1e9) * 1e3 if bw and nbytes else None
        ms = pu.get("ms_median") if pu and not pu.get("error") else None
        same_inputs = (tin.get((cid, None)) or {}).get("generator") == "ploss"
        dt = c["dtype"]
        rounded = dt in ("bf16", "f16") and ref is not None and "grad_sq_rounded" in ref
        ref_ok = bool(ref and not ref.get("error"))

        def delta(r):
            if not (r and ref_ok and same_inputs and r.get("grad_sq") is not None):
                return None
            return grad_delta(r, ref, rounded)

        d_ploss = delta(pu)
        errors = [f"{r.get('mode') or r.get('impl')}: {r['error']}" for r in (pu, ref) if r and r.get("error")]
        wrong = []
        if d_ploss is not None and (math.isnan(d_ploss) or d_ploss > GRAD_TOL.get(dt, 1e-3)):
            wrong.append(f"shadows Δ {fmt_rel(d_ploss)}")
        tparts, missed = [], []
        tfx = c.get("target_floor_x")
        if tfx is not None:
            tparts.append(f"≤ {tfx:g}× floor")
            if ms is None or floor is None:
                missed.append("÷ floor not measured")
            elif ms > tfx * floor:
                missed.append(f"{ms / floor:.2f}× floor")
        status = status_of(wrong, errors, pu, pskip.get((cid, None)), same_inputs, tparts, missed, small)
        verdicts.append((cid, status))

        def cell(r):
            if r and r.get("ms_median") is not None and not r.get("error"):
                return fmt_ms(r["ms_median"])
            return "error" if r and r.get("error") else "n/a"

        shape = inp.get("shape") or c["shape"]
        rows.append(f"| {cid} | {cell(pu)} | {cell(peers['foreach_lerp'])} | {cell(peers['foreach_mul_add'])} | "
                    f"{fmt_ms(floor)} | " + (f"{ms / floor:.2f}×" if ms and floor else "—") + " | "
                    + (f"{100 * floor / ms:.0f} %" if ms and floor else "—") + " | "
                    f"{fmt_bytes(pu.get('shadows_bytes') if pu else None)} | "
                    f"{fmt_bytes(pu.get('peak_extra_bytes') if pu else None)} | {fmt_rel(d_ploss)} | "
                    f"{', '.join(tparts) or '—'} | {status} |")

        desc = (f"{shape[0]} tensors of {shape[1]} elements ({shape[0] * shape[1]:,} parameters; the case: "
                f"{c['shape'][0]} × {c['shape'][1]}), {dt}, {json.dumps(c.get('opts', {}))}; params "
                f"{fmt_bytes(nbytes)}, shadows as much; param j ~ N(0, σ²) with seed + j, shadow j with seed + "
                f"tensors + j; floor = (params read + shadows read + shadows written) = {fmt_bytes(3 * nbytes if nbytes else None)} "
                f"at the copy bandwidth")
        if c.get("anchor"):
            desc += f"; issue: {c['anchor']}"
        d = [f"### {cid}", "", desc, ""]
        d.append("| run | median ms | p10–p90 ms | × ploss | peak extra | shadows Δ | sum s² | sum s·p |")
        d.append("|---|---|---|---|---|---|---|---|")
        for name, r in (("ploss ema:update()", pu), ("torch._foreach_lerp_", peers["foreach_lerp"]),
                        ("torch._foreach_mul_ + _foreach_add_", peers["foreach_mul_add"]),
                        ("float64 reference (one update)", ref)):
            if not r:
                continue
            if r.get("reason") and not r.get("error"):
                d.append(f"| {name} | n/a: {r['reason'][:200]} | | | | | | |")
                continue
            if r.get("error"):
                d.append(f"| {name} | error: {r['error'][:200]} | | | | | | |")
                continue
            spread = f"{fmt_ms(r.get('ms_p10'))}–{fmt_ms(r.get('ms_p90'))}" if r.get("ms_p10") is not None else "—"
            vs = f"{r['ms_median'] / ms:.2f}×" if r.get("ms_median") is not None and ms and r is not pu else "—"
            d.append(f"| {name} | {fmt_ms(r.get('ms_median'))} | {spread} | {vs} | {fmt_bytes(r.get('peak_extra_bytes'))} | "
                     f"{fmt_rel(delta(r)) if r is not ref else '—'} | {r.get('grad_sq')!r} | {r.get('grad_dot_x')!r} |")
        d.append("")
        if pu and pu.get("api"):
            d.append(f"ploss: `{pu['api']}` (decay {pu.get('decay')}), timed on the EMA's context's stream; the EMA "
                     f"keeps its shadows ({fmt_bytes(pu.get('shadows_bytes'))}), the update itself takes "
                     f"{fmt_bytes(pu.get('peak_extra_bytes'))} more. *shadows Δ*: sum(s²), sum(s·p) of the shadows after "
                     f"one update of the drawn shadows, against the float64 reference s + (1 − d)·(p − s)"
                     + (f" rounded to {dt}" if rounded else "") + ".")
            d.append("")
        det.extend(d)

    if not rows:
        return
    L.append("## EMA of parameters")
    L.append("")
    L.append("Not a loss (issue 20): `ploss.optim.EMA(params, {decay, warmup = false})` and `ema:update()` "
             "(shadow ← d·shadow + (1 − d)·param over every tensor, one launch on CUDA for up to 256 tensors) against "
             "`torch._foreach_lerp_(shadows, params, 1 − decay)` (n/a where the torch lacks it: before 2.0) and "
             "`torch._foreach_mul_` + `torch._foreach_add_` (timm's ModelEmaV3 without lerp). ms are medians; *floor* = "
             "(params read + shadows read + shadows written) / copy bandwidth; *ploss ÷ floor* the target's measure; "
             "*shadows* the memory the EMA keeps, *update extra* the update's own peak; *shadows Δ* as grad Δ above, "
             "on the shadows after one update.")
    L.append("")
    hdr = ("| case | ploss update | foreach_lerp_ | foreach mul+add | floor | ploss ÷ floor | % floor | shadows | "
           "update extra | shadows Δ | target | status |")
    L.append(hdr)
    L.append("|" + "|".join(["---"] * (hdr.count("|") - 1)) + "|")
    L.extend(rows)
    L.append("")
    details.extend(det)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--torch", required=True)
    ap.add_argument("--ploss", required=True)
    ap.add_argument("--cases", default=os.path.join(HERE, "cases.json"))
    ap.add_argument("--command", default="")
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    text, verdicts = build(args)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)
    for cid, status in verdicts:
        print(f"{cid:32s} {status}", file=sys.stderr)


if __name__ == "__main__":
    main()
