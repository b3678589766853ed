"""cuda_library: a cc_library whose sources are compiled by nvcc.

Bazel 4 has no CUDA rules, and a cc_library cannot include CUDA headers:
Bazel rejects headers from /usr/local/cuda/include (outside the execution
root and not a toolchain built-in directory). So every source that includes
CUDA headers (.cu kernels, or .cc files calling the runtime API) is compiled
by a genrule running nvcc into an object, and a cc_library wraps the objects.
Public headers of such libraries must not include CUDA headers.
"""

# Strict action env leaves nvcc off PATH; the toolkit is on the machine image.
_NVCC = "$$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"

# sm_80 (A100) and sm_90 (H100/H200) machine code, plus sm_90 PTX so newer
# GPUs can JIT it.
_GENCODE = " ".join([
    "-gencode arch=compute_80,code=sm_80",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
])

def cuda_library(name, srcs, hdrs = [], textual_hdrs = [], deps = [], **kwargs):
    """srcs: .cu or .cc files; hdrs: this library's headers; textual_hdrs:
    other workspace headers the sources include (absl and system headers need
    not be listed). deps are linked, not seen by nvcc."""
    objs = []
    for src in srcs:
        stem = name + "_" + src.replace("/", "_").replace(".", "_")
        native.genrule(
            name = stem,
            srcs = [src] + hdrs + textual_hdrs,
            outs = [stem + ".o"],
            cmd = " ".join([
                _NVCC,
                "-c -O3 --std=c++17 -Xcompiler -fPIC",
                _GENCODE,
                "-I.",
                "$(location %s)" % src,
                "-o $@",
            ]),
        )
        objs.append(":" + stem)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["//third_party/cuda:cudart"],
        **kwargs
    )
