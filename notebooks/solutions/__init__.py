"""Reference solutions of the exercises at the end of chapters 01-05, one module per chapter.

Read them after trying: ``from solutions.ch02 import ln_jacobian`` from a notebook (the notebooks run in this
folder's parent), and check any of them with its checker, ``b2t_lib.exercises.check_ln_jacobian(ln_jacobian)``.
``tests/test_exercises.py`` checks every solution and several wrong answers.
"""
