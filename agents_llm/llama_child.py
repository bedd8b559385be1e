"""The llama.cpp server process that :mod:`agents_llm.local_server` supervises: llama-cpp-python's
own server (``python -m llama_cpp.server``, its arguments unchanged), with weight repacking set by
the supervisor::

    python -m agents_llm.llama_child --repack off --model M.gguf --port 8080 ...

``--repack off`` loads the weights without llama.cpp's extra CPU buffer types (llama.cpp's own
``--no-repack``: the model parameter ``use_extra_bufts``). Those buffers hold the AMX copy of the
weights on a build with AMX, and the AMX matrix multiply segfaults on some Intel CPUs at the first
completion (llama.cpp issue 20824; dspy PR 10079 and ollama issue 17205 for the same crash on CI
machines): without them the weights stay in the plain CPU buffer and AMX code never runs.
llama-cpp-python does not expose the parameter, so this process sets it in the model parameters'
defaults before the server loads the model.
"""
from __future__ import annotations

import argparse
import sys


def load_without_repacking() -> None:
    """Make every model this process loads keep its weights in the plain CPU buffer (no AMX or
    CPU_REPACK copy). Raises RuntimeError where the installed llama-cpp-python has no such parameter."""
    import llama_cpp.llama_cpp as llama_lib

    if "use_extra_bufts" not in dict(llama_lib.llama_model_params._fields_):
        raise RuntimeError("this llama-cpp-python cannot load weights without repacking (no use_extra_bufts): "
                           "upgrade it with pip install -U 'llama-cpp-python[server]'")
    defaults = llama_lib.llama_model_default_params

    def without_extra_buffers():
        params = defaults()
        params.use_extra_bufts = False
        return params

    llama_lib.llama_model_default_params = without_extra_buffers  # read by llama_cpp.Llama on every load


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agents_llm.llama_child", add_help=False)
    parser.add_argument("--repack", choices=("on", "off"), required=True)
    args, server_argv = parser.parse_known_args(argv)
    if args.repack == "off":
        load_without_repacking()
    print(f"agents_llm.llama_child: weight repacking {args.repack}", file=sys.stderr, flush=True)
    from llama_cpp.server.__main__ import main as serve

    sys.argv = ["llama_cpp.server", *server_argv]  # llama_cpp.server reads its own arguments from sys.argv
    serve()


if __name__ == "__main__":
    main()
