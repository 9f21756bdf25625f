"""bench/ctc_cpu_torch.py T N C S: PyTorch CTC on the CPU, log_softmax + F.ctc_loss forward and
backward from f32 logits, median of 7 after 2 warm-up calls, in ms (bench/ctc_cpu.lua: ploss)."""
import sys, time, torch, torch.nn.functional as F
T, N, C, S = map(int, sys.argv[1:5])
torch.manual_seed(1)
z = torch.randn(T, N, C)
tl = torch.tensor([S // 2 + (n * 7) % (S // 2 + 1) for n in range(1, N + 1)])
il = torch.tensor([T - (n * 3) % (T // 5) for n in range(1, N + 1)])
y = torch.tensor([[1 + (n * 31 + i * 17) % (C - 1) for i in range(1, S + 1)] for n in range(1, N + 1)])
def step():
    x = z.clone().requires_grad_(True)
    F.ctc_loss(x.log_softmax(2), y, il, tl).backward()
for _ in range(2): step()
ts = []
for _ in range(7):
    t0 = time.perf_counter(); step(); ts.append(time.perf_counter() - t0)
ts.sort()
print(f"torch CPU log_softmax+ctc fwd+bwd T={T} N={N} C={C} S={S}: {ts[3]*1e3:.2f} ms (threads {torch.get_num_threads()})")
