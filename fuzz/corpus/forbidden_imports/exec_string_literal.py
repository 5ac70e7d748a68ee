# A literal string passed to exec is parsed and checked; the violation points at the string.
x = 1
exec("import socket\nsocket.socket()")
