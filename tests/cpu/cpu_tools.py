"""What the fast-layer tests share. Not a conftest.py: a second module named conftest would shadow
tests/conftest.py for `from conftest import`."""

import contextlib

import numpy as np

from kuiper import cpu  # noqa: F401  (registers the fast layers)
from kuiper.cpu import threads
from kuiper.runtime.backends import make_layer

THREADS = (1, 2, 3)


@contextlib.contextmanager
def running_on(count: int):
    """A numpy forward's span (threads.active) with `count` of kuiper's threads."""
    threads.set_num_threads(count)
    try:
        with threads.active():
            yield
    finally:
        threads.set_num_threads(None)


def assert_views_match_reference(type, inputs, out, **options):
    """run_numpy hands layers contiguous arrays only: here the fast layer's forward_numpy gets `inputs` and
    writes `out` as given (strided views, say), and must write what the reference's does, at 1-3 threads."""
    options = {"input_shapes": [x.shape for x in inputs], **options}
    expected = np.empty(out.shape, out.dtype)
    make_layer(type, **options).forward_numpy(inputs, [expected])
    fast = make_layer(type, backend="numpy", **options)
    for count in THREADS:
        out[...] = 0
        with running_on(count):
            fast.forward_numpy(inputs, [out])
        np.testing.assert_array_equal(out, expected, err_msg=f"{type} on {count} thread(s)")
