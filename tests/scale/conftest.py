import pytest

from tests.scale.common import dtype_policy


@pytest.fixture
def policy(request):
    """The global dtype policy `request.param` for one test, then the old one."""
    with dtype_policy(request.param):
        yield request.param
