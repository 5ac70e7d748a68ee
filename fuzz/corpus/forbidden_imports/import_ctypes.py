import ctypes
ctypes.CDLL(None)
