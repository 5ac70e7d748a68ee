# Sets the host's clock.
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
ts = (ctypes.c_long * 2)(int(time.time()) - 86400 * 365, 0)
r = libc.syscall(227, 0, ctypes.byref(ts))  # CLOCK_REALTIME
print("BROKEN: set the clock" if r == 0 else "clock_settime " + os.strerror(ctypes.get_errno()))
tv = (ctypes.c_long * 2)(int(time.time()) - 86400 * 365, 0)
r = libc.settimeofday(ctypes.byref(tv), None)
print("BROKEN: settimeofday" if r == 0 else "settimeofday " + os.strerror(ctypes.get_errno()))
print("ATTEMPTED")
