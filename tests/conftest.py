import os

import pytest
import torch

# Without a GPU, Triton runs kernels in its interpreter, and it decides so when it is imported (and
# when psattn's fused kernels are built): set it before any test can import Triton (torch.compile's
# tests do), so that the fused kernel's tests can run it on CPU tensors in any worker.
if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

# The subprocesses tests start (the command line, the benchmark scripts, sweep workers) run beside the other
# worker process: one intra-op thread each, as the tests in this process have (below), or two thread pools
# share two cores and each process runs slower than on one.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    """One intra-op thread for the whole suite: the tensors are small, the machine has two cores
    and tests run next to worker processes, so more threads only oversubscribe it."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)


@pytest.fixture(autouse=True, scope="session")
def _token_cache(tmp_path_factory):
    """Tokenized corpora go to a folder of this session, never to the user's cache."""
    import os

    previous = os.environ.get("PSATTN_CACHE")
    os.environ["PSATTN_CACHE"] = str(tmp_path_factory.mktemp("psattn-cache"))
    yield
    if previous is None:
        del os.environ["PSATTN_CACHE"]
    else:
        os.environ["PSATTN_CACHE"] = previous


@pytest.fixture(scope="session")
def certificate_runs(tmp_path_factory):
    """``run_certificates(op)`` of the library's operator and of each broken one, by operator name (``OPERATORS``):
    run once per session for the tests that read them (the certificates' own, and those that write a theory report,
    through ``certificates_run_once``)."""
    import pickle

    from helpers import shared
    from psattn.theory.certificates import run_certificates
    from psattn.theory.operators import OPERATORS

    def make(folder):
        folder.mkdir()
        runs = {name: run_certificates(op) for name, op in OPERATORS.items()}
        (folder / "runs.pickle").write_bytes(pickle.dumps(runs))

    return pickle.loads((shared(tmp_path_factory, "certificate-runs", make) / "runs.pickle").read_bytes())


@pytest.fixture
def certificates_run_once(monkeypatch, certificate_runs):
    """``run_certificates`` of every certificate answers from ``certificate_runs``: a theory report's certificates
    (about 5 s of seven runs of each) are run once per session, not once per report."""
    from psattn.theory import certificates

    def cached(op=None, names=None):
        assert names is None, "certificate_runs holds every certificate's run"
        return certificate_runs[(op or certificates.REFERENCE).name]

    monkeypatch.setattr(certificates, "run_certificates", cached)


@pytest.fixture
def fresh_token_cache(tmp_path, monkeypatch):
    """An empty token cache of the test's own (and no entry opened by another test); the text and
    text-data folders turn it on for every test they hold (their ``cache_dir``)."""
    from psattn.textdata import tokens as token_cache

    monkeypatch.setenv("PSATTN_CACHE", str(tmp_path / "cache"))
    token_cache._open.cache_clear()
    yield tmp_path / "cache"
    token_cache._open.cache_clear()
