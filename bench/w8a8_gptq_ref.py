"""w8a8_gptq_ref.py - the plain GPTQ solve for per-channel int8 (calib/gptq.h's
algorithm: dead columns zeroed, damp 0.01 * mean diag, upper Cholesky factor of
H^-1, columns in order, given per-row scales), for bench/w8a8_dyn_decompose.py."""
import torch


def gptq(w, h, scale, damp=0.01):
    w = w.clone().double()
    h = h.clone().double()
    n = w.shape[1]
    dead = torch.diag(h) == 0
    h[dead, dead] = 1
    w[:, dead] = 0
    h += damp * torch.mean(torch.diag(h)) * torch.eye(n, dtype=h.dtype)
    u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    q = torch.zeros_like(w)
    s = scale.double()
    for i in range(n):
        c = w[:, i:i + 1]
        qi = (c / s).round().clamp(-127, 127) * s
        q[:, i:i + 1] = qi
        w[:, i + 1:] -= ((c - qi) / u[i, i]) @ u[i:i + 1, i + 1:]
    return q.float()
