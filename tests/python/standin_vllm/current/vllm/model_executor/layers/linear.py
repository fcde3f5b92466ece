"""Stand-in of vLLM's UnquantizedLinearMethod (layers/linear.py, read
2026-12-06; no vLLM code): a linear layer's ``weight`` [N, K] in the model
dtype, nothing done after loading."""

from typing import List

import standin_torch as st


class UnquantizedLinearMethod:
    def create_weights(self, layer: st.Layer, input_size_per_partition: int,
                       output_partition_sizes: List[int]) -> None:
        layer.register_parameter("weight", st.Tensor(
            [sum(output_partition_sizes), input_size_per_partition], st.bfloat16))

    def process_weights_after_loading(self, layer: st.Layer) -> None:
        pass
