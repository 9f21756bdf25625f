"""PyTorch side of the CPU benchmark (bench/cpu.sh): one case, one JSON line.

    python3 bench/cpu_torch.py CASES_JSON ID RUNS WARMUP THREADS

Times `loss = f(x, t); loss.backward()` on a leaf x (x.grad = None before each run),
wall clock, median of RUNS after WARMUP, with torch.set_num_threads(THREADS).  Inputs have
the distribution of bench/cpu_ploss.lua's (logits N(0, 2^2), 1/16 of the labels ignored,
0/1 binary targets), drawn by torch.  The losses PyTorch lacks are the composites of the GPU
benchmark (bench/torch_bench.py's baseline()).
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

from torch_bench import baseline


def sigmoid_focal(x, t, alpha, gamma):
    # torchvision.ops.sigmoid_focal_loss, reduction 'mean'
    p = torch.sigmoid(x)
    ce = F.binary_cross_entropy_with_logits(x, t, reduction="none")
    p_t = p * t + (1 - p) * (1 - t)
    loss = ce * ((1 - p_t) ** gamma)
    alpha_t = alpha * t + (1 - alpha) * (1 - t)
    return (alpha_t * loss).mean()


def main():
    path, case_id, runs, warmup, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    torch.set_num_threads(threads)
    case = next(c for c in json.load(open(path))["cases"] if c["id"] == case_id)
    shape, opts = case["shape"], case["opts"]
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(shape, generator=g) * 2).requires_grad_()
    if case["target"] == "index":
        tshape = [shape[0]] + shape[2:]
        t = torch.randint(0, shape[1], tshape, generator=g)
        t[torch.randint(0, 16, tshape, generator=g) == 0] = opts["ignore_index"]
    else:
        t = torch.randint(0, 2, shape, generator=g).float()
    if case["torch"] == "cross_entropy":
        fn = lambda: F.cross_entropy(x, t, ignore_index=opts["ignore_index"],
                                     label_smoothing=opts.get("label_smoothing", 0.0))
    elif case["torch"] == "sigmoid_focal":
        fn = lambda: sigmoid_focal(x, t, opts["alpha"], opts["gamma"])
    elif case["torch"] == "bce_with_logits":
        fn = lambda: F.binary_cross_entropy_with_logits(x, t)
    else:
        f = baseline({"loss": case["torch"], "opts": opts})
        fn = lambda: f(x, t)

    def run():
        x.grad = None
        fn().backward()

    for _ in range(warmup):
        run()
    times = []
    for _ in range(runs):
        x.grad = None
        t0 = time.perf_counter()
        fn().backward()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    print(json.dumps({"side": "torch", "id": case_id, "threads": threads, "fused_ms": times[(runs - 1) // 2],
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
