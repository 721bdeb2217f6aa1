"""How the callbacks read and write tf_keras (Keras 2) state (see ronde.keras.callback_impl):
through the Keras backend's batch_get_value / batch_set_value, which run in K.get_session()
in TF1 graph mode and directly when eager."""

import tensorflow as tf


class Keras2Access:
    def __init__(self, keras):
        self.keras = keras
        self.backend = keras.backend

    def is_variable(self, value):
        return isinstance(value, tf.Variable)

    def read(self, variables):
        return self.backend.batch_get_value(list(variables))

    def assign(self, variables, values):
        self.backend.batch_set_value(list(zip(variables, values)))

    def model_variables(self, model):
        return list(model.variables)

    def optimizer_variables(self, optimizer):
        variables = optimizer.variables  # a method on legacy optimizers, a list on new ones
        return list(variables() if callable(variables) else variables)

    def learning_rate(self, optimizer):
        return float(self.backend.get_value(optimizer.learning_rate))

    def set_learning_rate(self, optimizer, value):
        if isinstance(optimizer.learning_rate, tf.Variable):
            self.backend.set_value(optimizer.learning_rate, value)
        else:
            optimizer.learning_rate = value

    def momentum_is_variable(self, optimizer):
        # Legacy optimizers keep momentum as a variable (a hyperparameter read at every step);
        # the new ones as a Python number, a constant of the compiled step.
        return isinstance(getattr(optimizer, "momentum", None), tf.Variable)

    def momentum(self, optimizer):
        return float(self.backend.get_value(optimizer.momentum))

    def set_momentum(self, optimizer, value):
        self.backend.set_value(optimizer.momentum, value)
