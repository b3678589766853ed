"""stoker_fuzz_target: the three rules of one fuzz target (see BUILD)."""

def stoker_fuzz_target(name, deps):
    """Defines <name>_fuzz, <name>_fuzzer and <name>_corpus_test.

    Args:
      name: the target's name; its source is <name>_fuzz.cc and its seed
        corpus corpus/<name>/.
      deps: what <name>_fuzz.cc uses.
    """
    native.cc_library(
        name = name + "_fuzz",
        testonly = True,
        srcs = [name + "_fuzz.cc"],
        deps = deps + [":fuzz_check"],
        # Nothing in the library is referenced by name: libFuzzer's main or
        # replay_main.cc calls LLVMFuzzerTestOneInput.
        alwayslink = True,
    )

    # Needs clang: build with --config=fuzz (which also instruments the
    # project's sources for coverage, ASan and UBSan).
    native.cc_binary(
        name = name + "_fuzzer",
        testonly = True,
        linkopts = ["-fsanitize=fuzzer,address,undefined"],
        tags = ["manual"],
        deps = [":" + name + "_fuzz"],
    )

    native.cc_test(
        name = name + "_corpus_test",
        size = "small",
        args = ["tests/fuzz/corpus/" + name],
        data = native.glob(["corpus/" + name + "/**"]),
        deps = [
            ":" + name + "_fuzz",
            ":replay_main",
        ],
    )
