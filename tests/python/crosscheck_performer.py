"""Cross-check: this library's FAVOR+ against the PyPI package performer-pytorch (FastAttention, softmax kernel).

The projection Ω written by the library replaces the package's random buffer, so both use the same features; the
library side sets feature_epsilon = 1e-4 like the package's softmax_kernel. Usage: crosscheck_performer.py BUILD_DIR
"""
import sys

import numpy as np
from crosscheck_common import check_cases, import_or_skip

torch = import_or_skip("torch")
performer_pytorch = import_or_skip("performer_pytorch")


def package_output(meta, dtype, load, q, k, v):
    torch_dtype = torch.float64 if dtype == np.float64 else torch.float32
    attention = performer_pytorch.FastAttention(dim_heads=q.shape[-1], nb_features=meta["features"])
    attention = attention.to(torch_dtype).eval()
    with torch.no_grad():
        attention.projection_matrix.copy_(torch.from_numpy(load("projection.txt")))
        as_tensor = lambda t: torch.from_numpy(np.ascontiguousarray(t))[None]  # [1, h, n, d]
        return attention(as_tensor(q), as_tensor(k), as_tensor(v))[0].numpy()


if __name__ == "__main__":
    sys.exit(check_cases(sys.argv[1], ["performer"], package_output))
