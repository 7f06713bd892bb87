"""Cross-check: this library's Nyströmformer against the PyPI package nystrom-attention (lucidrains).

The package's NystromAttention takes token embeddings x, not Q, K, V. With dim = 3·h·d, to_qkv set to the identity
and to_out to [I; 0; 0], x = [Q | K | V] (heads side by side) gives exactly attention(Q, K, V) in the first h·d
output columns. residual=False (no depth-wise convolution); the library side uses the package's batch-wide α and
front padding (nystromformer.hpp). Usage: crosscheck_nystromformer.py BUILD_DIR
"""
import sys

import numpy as np
from crosscheck_common import check_cases, import_or_skip

torch = import_or_skip("torch")
nystrom_attention = import_or_skip("nystrom_attention")


def package_output(meta, dtype, load, q, k, v):
    heads, n, d = q.shape
    landmarks, iterations = meta["landmarks"], meta["pinv_iterations"]
    inner = heads * d
    module = nystrom_attention.NystromAttention(dim=3 * inner, dim_head=d, heads=heads, num_landmarks=landmarks,
                                                pinv_iterations=iterations, residual=False)
    module = module.to(torch.float64 if dtype == np.float64 else torch.float32).eval()
    with torch.no_grad():
        module.to_qkv.weight.copy_(torch.eye(3 * inner))
        linear = module.to_out[0]
        linear.weight.zero_()
        linear.weight[:inner, :].copy_(torch.eye(inner))
        linear.bias.zero_()
        heads_side_by_side = lambda t: np.concatenate(list(t), axis=1)  # [h, n, d] -> [n, h·d]
        x = np.concatenate([heads_side_by_side(t) for t in (q, k, v)], axis=1)[None]
        out = module(torch.from_numpy(np.ascontiguousarray(x)))[0, :, :inner].numpy()
    return np.stack([out[:, h * d:(h + 1) * d] for h in range(heads)])


if __name__ == "__main__":
    sys.exit(check_cases(sys.argv[1], ["nystromformer", "nystromformer_pad"], package_output))
