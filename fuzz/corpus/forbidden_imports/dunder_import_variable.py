name = "sub" + "process"
module = __import__(name)
