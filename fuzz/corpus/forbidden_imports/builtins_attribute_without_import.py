# __builtins__ needs no import; the call is still recognised by its attribute name.
__builtins__.__import__("ctypes")
