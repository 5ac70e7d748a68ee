# Reaches the kernel keyrings (shared with the host, not namespaced).
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING = 0, -4
r = libc.syscall(250, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 1)
print("BROKEN: keyctl answered" if r >= 0 else "keyctl " + os.strerror(ctypes.get_errno()))
r = libc.syscall(248, b"user", b"warden-attack", b"x", 1, -4)  # add_key
print("BROKEN: add_key" if r >= 0 else "add_key " + os.strerror(ctypes.get_errno()))
print("ATTEMPTED")
