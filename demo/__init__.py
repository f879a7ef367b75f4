"""The demo (``tsctl demo``, ``make demo``): the seed scenario played through the real code on the local
stack (:mod:`local_runtime`), judged from outside. :mod:`demo.options` says what is played,
:mod:`demo.scenario` publishes it, :mod:`demo.run` runs and observes it, :mod:`demo.report` judges and
draws it, :mod:`demo.query_checks` compares the API's answers with what was published."""
