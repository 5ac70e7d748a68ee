# Loads a BPF map and program (the kernel's attack surface).
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
attr = (ctypes.c_uint32 * 32)(2, 4, 4, 1)  # BPF_MAP_TYPE_ARRAY, key 4, value 4, one entry
r = libc.syscall(321, 0, ctypes.byref(attr), ctypes.sizeof(attr))  # BPF_MAP_CREATE
print("BROKEN: bpf map made" if r >= 0 else "bpf " + os.strerror(ctypes.get_errno()))
print("ATTEMPTED")
