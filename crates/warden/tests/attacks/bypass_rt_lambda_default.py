# Import socket from a lambda's default argument.


# prelude: attempt (prelude/attempt.py, put here by the runner)

(lambda i=(vars(__builtins__) if not isinstance(__builtins__, dict) else __builtins__)["__imp" + "ort__"]: attempt(i("sock" + "et")))()
print("ATTEMPTED")
