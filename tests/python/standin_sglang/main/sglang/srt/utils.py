"""sglang.srt.utils' serializer and dynamic import (standin_sglang_runtime)."""
from standin_sglang_runtime import MultiprocessingSerializer, dynamic_import  # noqa: F401
