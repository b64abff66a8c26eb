"""Packaging for openprocurement_feed."""

import os

from setuptools import find_packages, setup

HERE = os.path.abspath(os.path.dirname(__file__))


def read(name: str) -> str:
    with open(os.path.join(HERE, name), encoding="utf-8") as handle:
        return handle.read()


EMBEDDED = ["secantusdb>=0.7.0b3", "waitress>=2.1"]
CLIENT = ["requests>=2.31", "tenacity>=8.2", "tqdm>=4.66", "rich>=13"]
DOCS = ["sphinx>=7"]
METRICS = ["prometheus_client>=0.17"]
# The feed pages' JSON renderer uses orjson when installed (several times
# faster than the standard library on a 1000-item page); optional.
FAST = ["orjson>=3.9"]
# Serving many long-poll waiters: gunicorn with gevent workers
# (examples/gunicorn_gevent.conf.py; tests/test_gunicorn_gevent.py).
DEPLOY = ["gunicorn>=23", "gevent>=24.10.1"]
# The pictures (race --plot, python -m benchmarks orders --plot, ops/e2e.py
# --plot, make plots); the docs' figures are drawn with it.
PLOT = ["matplotlib>=3.7"]
# The mirror (openprocurement-feed mirror, verify --db, export): the
# crawler's copy in SQLite or PostgreSQL through SQLAlchemy Core, psycopg 3
# as PostgreSQL's driver.
MIRROR = ["sqlalchemy>=2.0", "psycopg[binary]>=3.1"]
TEST = [
    "build>=1.0",
    "pytest>=7.4",
    "pytest-timeout>=2.2",
    "pytest-cov>=5.0",
    # make test: one worker per half core, each with its own embedded
    # server (pytest-xdist), in random order with the seed printed
    # (pytest-randomly)
    "pytest-xdist>=3.5",
    "pytest-randomly>=3.15",
    "webtest>=3.0",
    "hypothesis>=6.90",
    # tests/test_reconcile_nip77.py: one pytest-xdist worker installs the
    # pinned nostr-tools (npm) while the others wait on a file lock
    "filelock>=3.12",
    # tests/test_ops_files.py reads the Prometheus rules (ops/prometheus)
    "pyyaml>=6.0",
    # tests/test_openapi.py validates the OpenAPI document; tests/test_fuzz.py
    # holds the demo to it (make test, make fuzz). schemathesis 4 needs
    # Python 3.11: on 3.10 (the matrix's py310) the fuzz tests are skipped.
    "openapi-spec-validator>=0.7",
    "schemathesis>=4.30; python_version >= '3.11'",
    *EMBEDDED,
    *CLIENT,
    *DOCS,
    *METRICS,
    *FAST,
    *DEPLOY,
    *PLOT,
    *MIRROR,
]
# The maintenance checks (make lint): ruff lints and checks the format, mypy
# checks the types, bandit looks for security mistakes, lint-imports keeps the
# layout's contracts; the stubs cover the typed-by-stub libraries the package
# and its tests use (pyramid and cornice have none: see pyproject.toml).
LINT = [
    "ruff>=0.6",
    "mypy>=1.10",
    "types-requests",
    "types-tqdm",
    "types-waitress",
    "types-webob",
    "types-webtest",
    # security checks of the package's code (make lint; pyproject.toml [tool.bandit])
    "bandit>=1.7.5",
    # the layout's contracts: which subpackage may import which (make lint;
    # pyproject.toml [tool.importlinter])
    "import-linter>=2.1",
]
# The Python matrix (make matrix).
MATRIX = ["tox>=4.11"]

setup(
    name="openprocurement_feed",
    version="0.1.0.dev0",
    description=("A paginated feed for openprocurement-style Pyramid APIs that never loses a document"),
    long_description=read("README.rst") + "\n\n" + read("CHANGES.rst"),
    long_description_content_type="text/x-rst",
    classifiers=[
        "Framework :: Pyramid",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "License :: OSI Approved :: Apache Software License",
        "Topic :: Internet :: WWW/HTTP :: WSGI :: Application",
        "Topic :: Database",
    ],
    keywords="pyramid mongodb feed pagination openprocurement watermark",
    license="Apache-2.0",
    packages=find_packages(exclude=["tests", "tests.*", "benchmarks", "benchmarks.*"]),
    # the embedded server's launcher: a program of its own (GPL-2.0, as the
    # server it runs), beside the package, never imported by it
    py_modules=["openprocurement_feed_secantus"],
    include_package_data=True,
    zip_safe=False,
    python_requires=">=3.10",
    install_requires=["pyramid>=2.0", "cornice>=6.0", "pymongo>=4.7"],
    extras_require={
        "embedded": EMBEDDED,
        "client": CLIENT,
        "docs": DOCS,
        "metrics": METRICS,
        "fast": FAST,
        "deploy": DEPLOY,
        "plot": PLOT,
        "mirror": MIRROR,
        "test": TEST,
        "lint": LINT,
        "matrix": MATRIX,
    },
    entry_points={
        "paste.app_factory": ["demo = openprocurement_feed.demo:main"],
        "console_scripts": ["openprocurement-feed = openprocurement_feed.cli:main"],
    },
)
