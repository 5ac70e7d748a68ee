def decorate(f):
    return f


@decorate
def f(x=__import__("pickle")):
    return x
