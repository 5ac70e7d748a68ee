class Sneaky:
    def method(self):
        return 1

    import shutil
