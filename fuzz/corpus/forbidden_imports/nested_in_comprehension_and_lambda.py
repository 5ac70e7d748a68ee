squares = [n * n for n in range(3)]
load = lambda: [__import__("marshal") for _ in range(1)]
