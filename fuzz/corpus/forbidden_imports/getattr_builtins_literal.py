# getattr with a literal "__import__" is recognised as the import function, so the module it is
# called with is checked like any import.
getattr(__builtins__, '__import__')('os')
