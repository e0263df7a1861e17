"""A module whose function `work` shares its name with modb's, and a
property whose getter and setter share the qualified name `Box.v`."""


class Box:
    def __init__(self):
        self._v = 0

    @property
    def v(self):
        total = 0
        for i in range(200):
            total += i * i
        return total + self._v

    @v.setter
    def v(self, x):
        total = 0
        for i in range(200):
            total ^= i * x
        self._v = total


def work(n):
    box = Box()
    acc = 0
    for _ in range(n):
        acc += box.v
        box.v = acc & 0xFF
    return acc
