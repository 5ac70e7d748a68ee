# Makes a userfaultfd (used to win kernel races in exploits).
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(323, 0)
print("BROKEN: userfaultfd made" if r >= 0 else "userfaultfd " + os.strerror(ctypes.get_errno()))
print("ATTEMPTED")
