# Sets up an io_uring (a large kernel attack surface that also bypasses syscall filters).
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
params = (ctypes.c_uint8 * 120)()
r = libc.syscall(425, 4, ctypes.byref(params))
print("io_uring set up" if r >= 0 else "io_uring_setup " + os.strerror(ctypes.get_errno()))
print("ATTEMPTED")
