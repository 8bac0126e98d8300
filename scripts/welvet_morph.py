#!/usr/bin/env python3
"""Loom's own conversion of a .entity to another weight dtype, for tests that hold ours to it:
`welvet_morph.py IN.entity OUT.entity DTYPE` loads IN with welvet 0.80.0 (`Network.deserialize_entity`), morphs
every top-level layer that has weights to DTYPE (`morph_layer`; welvet does not reach layers nested in parallel or
sequential blocks) and writes Loom's `serialize_entity` of the result to OUT."""
import sys

import welvet
from welvet import utils


def main(src, dst, dtype):
    code = {name: code for code, name in utils.DType._NAMES.items()}[dtype]
    net = welvet.Network.deserialize_entity(open(src, "rb").read())
    for i in range(net.info()["total_layers"]):
        try:
            utils.morph_layer(net._handle, i, code)
        except RuntimeError as e:
            if "no WeightStore" not in str(e):
                raise
    open(dst, "wb").write(net.serialize_entity())


if __name__ == "__main__":
    main(*sys.argv[1:])
