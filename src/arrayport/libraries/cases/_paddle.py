"""PaddlePaddle: the converter (no uint16; negative strides copied; tensors always
writable), its tensors in the matrix, its unusual tensors.

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._paddle``."""

from __future__ import annotations

from arrayport.libraries.toolkit import INDEXING, Kind, NotOffered, bfloat16_bits, call, module


# The sample layouts a tensor can have (PaddlePaddle has no negative strides).
_PADDLE_INDEXING = {layout: index for layout, index in INDEXING.items() if layout != "negative"}


def _make_paddle(base, layout):
    import arrayport
    if layout not in _PADDLE_INDEXING:
        raise NotOffered(f"PaddlePaddle tensors cannot be {layout}")
    try:
        tensor = arrayport.to(base, "paddle", copy=True)
    except TypeError as exc:
        raise NotOffered(str(exc)) from None
    return _PADDLE_INDEXING[layout](tensor)


def paddle_kinds() -> list[Kind]:
    def paddle():
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "No ccache found", on first import
            return module("paddle")

    def values(t):
        return t.numpy()

    def bfloat16_values(t):
        return bfloat16_bits(t.numpy())  # Paddle's numpy() gives bfloat16 as uint16 bits

    def base():
        return paddle().arange(12, dtype="float32").reshape([3, 4])

    return [
        Kind("paddle", "plain", base, values),
        Kind("paddle", "transposed", lambda: base().T, values),
        Kind("paddle", "sliced", lambda: base()[1:, ::2], values),
        Kind("paddle", "grad", lambda: paddle().to_tensor([1.0, 2.0], stop_gradient=False),
             values, False),
        Kind("paddle", "bfloat16", lambda: paddle().to_tensor([1.5, -2.0], dtype="bfloat16"),
             bfloat16_values, needs=("ml_dtypes",)),
        # sparse: Paddle's __dlpack__, exchange API and __array__ all segfault on it
        Kind("paddle", "sparse",
             lambda: paddle().sparse.sparse_coo_tensor([[0], [1]], [1.0], [2, 2]), None, False),
    ]


make = _make_paddle
kinds = paddle_kinds


def routes():
    return {"dlpack": call("paddle", "from_dlpack")}


CHECK = (lambda a: module("paddle").to_tensor(a), lambda x: module("paddle").from_dlpack(x),
         None)
