"""The numpy twin of channel_scale.cl."""


def channel_scale(inputs, weights, params):
    x = inputs[0]
    per_channel = (1, -1) + (1,) * (x.ndim - 2)  # scale[c] lined up with dimension 1 of x
    return x * weights["scale"].reshape(per_channel) + weights["shift"].reshape(per_channel)
