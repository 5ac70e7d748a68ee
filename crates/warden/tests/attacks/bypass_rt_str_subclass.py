# Pass __import__ a str subclass that answers checks differently.


# prelude: attempt (prelude/attempt.py, put here by the runner)

imp = vars(__builtins__)["__imp" + "ort__"] if not isinstance(__builtins__, dict) else __builtins__["__imp" + "ort__"]
class Name(str):
    def startswith(self, *a):
        return True
    def __eq__(self, other):
        return True
    __hash__ = str.__hash__
attempt(imp(Name("os")))
print("ATTEMPTED")
