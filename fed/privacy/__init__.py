"""Privacy events, composition, ledgers, accountants and calibration, and the noise and sampling a
release draws: the bottom layer, on which every guarantee rests.

May import: nothing outside it.
"""
