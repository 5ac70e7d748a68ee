import builtins
builtins.__import__("os")
