"""A module whose function `work` shares its name with moda's; it lies on
other lines than moda's, so a frame given the other's file is caught."""


def unused_padding_one():
    return 1


def unused_padding_two():
    return 2


def unused_padding_three():
    return 3


def unused_padding_four():
    return 4


def unused_padding_five():
    return 5


def unused_padding_six():
    return 6


def work(n):
    acc = 0
    for i in range(n * 400):
        acc = (acc * 31 + i) % 1000003
    return acc
