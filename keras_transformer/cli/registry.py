"""The tasks of `keras-transformer train` and `evaluate`, by name: the one
place where a task's name picks its recipe (`TASKS[name]`)."""

from keras_transformer.cli.recipe_bert import BERTRecipe
from keras_transformer.cli.recipe_gpt2 import GPT2Recipe
from keras_transformer.cli.recipe_seq2seq import Seq2SeqRecipe

TASKS = {
    recipe.name: recipe for recipe in (GPT2Recipe(), BERTRecipe(), Seq2SeqRecipe())
}
