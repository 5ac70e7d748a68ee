def f():
    x = 1
      y = 2
    return x
