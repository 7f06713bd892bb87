"""Cross-check: this library's Linformer against the PyPI package linformer (LinformerSelfAttention).

With dim = 3d, one head of size d, to_q/to_k/to_v selecting the thirds of x = [Q | K | V] and to_out = [I; 0; 0],
the module computes softmax(sQ(EK)ᵀ)(FV) with proj_k = Eᵀ, proj_v = Fᵀ (the library's matrices).
Usage: crosscheck_linformer.py BUILD_DIR
"""
import sys

import numpy as np
from crosscheck_common import check_cases, import_or_skip

torch = import_or_skip("torch")
linformer = import_or_skip("linformer")


def package_output(meta, dtype, load, q, k, v):
    n, d = q.shape[1:]
    torch_dtype = torch.float64 if dtype == np.float64 else torch.float32
    module = linformer.LinformerSelfAttention(dim=3 * d, seq_len=n, k=meta["projected"], heads=1, dim_head=d)
    module = module.to(torch_dtype).eval()
    with torch.no_grad():
        identity = torch.eye(d, dtype=torch_dtype)
        for index, linear in enumerate((module.to_q, module.to_k, module.to_v)):
            linear.weight.zero_()
            linear.weight[:, index * d:(index + 1) * d].copy_(identity)
        module.to_out.weight.zero_()
        module.to_out.weight[:d, :].copy_(identity)
        module.to_out.bias.zero_()
        module.proj_k.copy_(torch.from_numpy(load("e.txt").T.copy()))
        module.proj_v.copy_(torch.from_numpy(load("f.txt").T.copy()))
        x = torch.from_numpy(np.concatenate([q[0], k[0], v[0]], axis=1))[None]
        return module(x)[0, :, :d].numpy()[None]


if __name__ == "__main__":
    sys.exit(check_cases(sys.argv[1], ["linformer"], package_output))
