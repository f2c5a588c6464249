"""Helpers the tests import (``from support.fake_device import FakeAccelerator``)."""
