import sys

from keras_transformer.cli import main

if __name__ == "__main__":
    sys.exit(main())
