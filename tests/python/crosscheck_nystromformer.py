"""Cross-check: this library's Nyströmformer against the PyPI package nystrom-attention (lucidrains).

The package's NystromAttention takes token embeddings x, not Q, K, V. With dim = 3·h·d, to_qkv set to the identity
and to_out to [I; 0; 0], x = [Q | K | V] (heads side by side) gives exactly attention(Q, K, V) in the first h·d
output columns. residual=False (no depth-wise convolution); the library side uses the package's batch-wide α and
front padding (nystromformer.hpp). Usage: crosscheck_nystromformer.py BUILD_DIR
"""
import sys

import numpy as np
from crosscheck_common import case_dirs, compare, import_or_skip, read_case

torch = import_or_skip("torch")
nystrom_attention = import_or_skip("nystrom_attention")


def package_output(q, k, v, landmarks, iterations, dtype):
    heads, n, d = q.shape
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


def main(build_dir):
    ok = True
    for case in ("nystromformer", "nystromformer_pad"):
        for directory in case_dirs(build_dir, case):
            meta, dtype, _, q, k, v, ours = read_case(directory)
            theirs = package_output(q, k, v, meta["landmarks"], meta["pinv_iterations"], dtype)
            ok &= compare(case, ours, theirs, directory.name.rsplit("_", 1)[1])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
