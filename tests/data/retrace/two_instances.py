"""Fixture for `tflab retrace`: two instances share one method's qualname.

student: batch 4 three times -> 1 trace.
teacher: batch 4, then 2 -> 2 traces, the second x: shape (4, 3) -> (2, 3).
Each instance gets its own tf.function object (Function.__get__), with its own cache.
"""

import tensorflow as tf


class Net(tf.Module):
    def __init__(self, n):
        super().__init__()
        self.w = tf.Variable(tf.ones([n, 2]))

    @tf.function
    def __call__(self, x):
        return x @ self.w


student, teacher = Net(3), Net(3)
for bs in (4, 4, 4):
    student(tf.ones([bs, 3]))
teacher(tf.ones([4, 3]))
teacher(tf.ones([2, 3]))
print("student", hex(id(student)), "teacher", hex(id(teacher)))
