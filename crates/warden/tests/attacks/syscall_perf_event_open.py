# Opens a hardware/software performance counter (a side channel and kernel attack surface).
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
attr = (ctypes.c_uint8 * 128)()
attr[0] = 1  # PERF_TYPE_SOFTWARE
ctypes.c_uint32.from_buffer(attr, 4).value = 128  # size
r = libc.syscall(298, ctypes.byref(attr), 0, -1, -1, 0)
print("BROKEN: perf event opened" if r >= 0 else "perf_event_open " + os.strerror(ctypes.get_errno()))
print("ATTEMPTED")
