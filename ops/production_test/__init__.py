"""The production-shaped end-to-end test (``ops/e2e.py``, ``make test-ops``),
one module per part: what it deploys (:mod:`.deployment`), what it needs
(:mod:`.requirements`), its processes (:mod:`.processes`), its clock
(:mod:`.clock`), its Prometheus (:mod:`.prometheus`), what else it watches
(:mod:`.watchers`), its load (:mod:`.load`), one run (:mod:`.run`), the
faults (:mod:`.faults`), the figures (:mod:`.figures`) and checks
(:mod:`.checks`), the timeline (:mod:`.report`) and the command line
(:mod:`.main`). The modules import each other relatively: the package runs
as ``production_test`` under ``ops/e2e.py`` and as ``ops.production_test``
from the repository root (the tests)."""
