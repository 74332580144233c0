"""AdamW that leaves biases, LayerNorm and embeddings out of weight decay."""

import keras

# Substrings of variable paths that are not decayed (BERT and GPT-2 practice).
NO_DECAY = ("bias", "layer_norm", "embedding")


@keras.saving.register_keras_serializable(package="keras_transformer")
class AdamW(keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` whose decay exclusions survive saving.

    Variables whose path contains any of `exclude_from_decay` (by default
    biases, LayerNorm scales/offsets and embeddings) are not weight-decayed.

    Args:
        learning_rate: float or schedule.
        weight_decay: decoupled weight decay.
        exclude_from_decay: substrings of variable paths not to decay.
        **kwargs: any other `keras.optimizers.AdamW` argument (`beta_2`,
            `clipnorm`, `global_clipnorm`, ...).

    Examples:
        >>> import keras_transformer as kt
        >>> optimizer = kt.training.AdamW(1e-3, weight_decay=0.1, beta_2=0.99)
        >>> optimizer.get_config()["exclude_from_decay"]
        ['bias', 'layer_norm', 'embedding']
    """

    def __init__(
        self,
        learning_rate=0.001,
        weight_decay=0.01,
        exclude_from_decay=NO_DECAY,
        **kwargs,
    ):
        super().__init__(
            learning_rate=learning_rate, weight_decay=weight_decay, **kwargs
        )
        self.exclude_from_decay = list(exclude_from_decay)
        self.exclude_from_weight_decay(var_names=self.exclude_from_decay)

    def get_config(self):
        return {**super().get_config(), "exclude_from_decay": self.exclude_from_decay}
