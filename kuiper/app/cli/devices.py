"""`kuiper devices`: every OpenCL device, whether it is usable (or why not), and the one kuiper picks."""

from __future__ import annotations


def add_parser(sub, common, custom) -> None:
    """The devices command."""
    devices = sub.add_parser("devices", parents=[common], help="list OpenCL platforms and devices")
    devices.set_defaults(func=cmd_devices)


def cmd_devices(args) -> None:
    from kuiper.core.errors import BackendError
    from kuiper.opencl import devices

    try:
        chosen = devices.select_device().int_ptr
    except BackendError:  # listed below, device by device
        chosen = None
    for p, d, platform, device in devices.all_devices():
        reason = devices.probe(device)
        mark = "*" if device.int_ptr == chosen else " "
        state = "usable" if reason is None else f"NOT usable: {reason}"
        print(f"{mark} {p}:{d}  {platform.name.strip()} / {state} / " + ", ".join(
            f"{k}: {v}" for k, v in devices.describe(device).items()))
    if chosen is None:
        print("no usable device: backend='opencl' cannot run here; " + devices.CPU_REMEDY)
    else:
        print("* = the device backend='opencl' picks now (set KUIPER_CL_DEVICE=P:D or a name to choose)")
