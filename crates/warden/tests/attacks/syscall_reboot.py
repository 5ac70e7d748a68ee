# Reboots (or, in a pid namespace, kills its init) and turns off Ctrl-Alt-Del handling.
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
MAGIC1, MAGIC2 = 0xfee1dead, 672274793
# CAD_OFF is harmless on success; RESTART would reboot a host that let it through.
r = libc.syscall(169, ctypes.c_long(MAGIC1), ctypes.c_long(MAGIC2), 0, None)
print("BROKEN: reboot(CAD_OFF) accepted" if r == 0 else "reboot " + os.strerror(ctypes.get_errno()))
print("ATTEMPTED")
