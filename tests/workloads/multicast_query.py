"""Asks the driver what Transformer Engine's userbuffers ask before they set up (switch multicast, memory exportable
as a file descriptor), then makes their first multicast call. Prints the answers and the call's status."""

import ctypes

import torch

torch.cuda.init()
cuda = ctypes.CDLL("libcuda.so.1")
answers = {}
for name, attribute in (("multicast", 132), ("posix_fd", 103)):
    value = ctypes.c_int(-1)
    assert cuda.cuDeviceGetAttribute(ctypes.byref(value), attribute, 0) == 0
    answers[name] = value.value
prop = (ctypes.c_byte * 64)()  # CUmulticastObjectProp, zeroed
granularity = ctypes.c_size_t(0)
status = cuda.cuMulticastGetGranularity(ctypes.byref(granularity), prop, 0)
print(f"multicast {answers['multicast']} posix_fd {answers['posix_fd']} granularity status {status}")
