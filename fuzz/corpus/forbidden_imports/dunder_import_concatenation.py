# The module name is computed: refused in strict mode as a dynamic import, passed otherwise.
m = __import__('o'+'s')
