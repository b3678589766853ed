"""py_package: copies a package's Python sources into bazel-bin.

The importable package is assembled in bazel-bin/client/python/stoker/: the
sources from client/python/stoker/ (*.py, the extension's stub *.pyi and the
py.typed marker; copied by this rule) next to the extension built by
cc_binary "stoker/_stoker.so". A genrule cannot do the
copy: its outputs may not share a label with a source file, and
client/python/stoker/__init__.py is both. Files declared by a rule have no
label, so the same relative path works.
"""

def _py_package_impl(ctx):
    outs = []
    prefix = ctx.label.package + "/"
    for src in ctx.files.srcs:
        if not src.short_path.startswith(prefix):
            fail("%s is not under %s" % (src.short_path, prefix))
        out = ctx.actions.declare_file(src.short_path[len(prefix):])
        ctx.actions.run_shell(
            inputs = [src],
            outputs = [out],
            command = 'cp "$1" "$2"',
            arguments = [src.path, out.path],
            mnemonic = "CopyPySource",
        )
        outs.append(out)
    files = depset(outs + ctx.files.data)
    return [DefaultInfo(files = files, runfiles = ctx.runfiles(transitive_files = files))]

py_package = rule(
    implementation = _py_package_impl,
    doc = "Copies srcs (files of this package: Python sources, stubs and " +
          "the py.typed marker) to the same relative paths " +
          "under bazel-bin; data (e.g. the extension) is added to the " +
          "outputs and runfiles as is.",
    attrs = {
        "srcs": attr.label_list(allow_files = [".py", ".pyi", "py.typed"]),
        "data": attr.label_list(allow_files = True),
    },
)
