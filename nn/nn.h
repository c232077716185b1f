// nn/nn.h — every layer, loss, initialiser and optimizer.
#pragma once

#include <tandem/nn/activation.h>
#include <tandem/nn/activation_checkpoint.h>
#include <tandem/nn/batchnorm.h>
#include <tandem/nn/container.h>
#include <tandem/nn/conv.h>
#include <tandem/nn/dropout.h>
#include <tandem/nn/embedding.h>
#include <tandem/nn/gpt.h>
#include <tandem/nn/init.h>
#include <tandem/nn/layer_norm.h>
#include <tandem/nn/linear.h>
#include <tandem/nn/loss.h>
#include <tandem/nn/module.h>
#include <tandem/nn/moe.h>
#include <tandem/nn/optim/adam.h>
#include <tandem/nn/optim/grad_scaler.h>
#include <tandem/nn/optim/lr_scheduler.h>
#include <tandem/nn/optim/optimizer.h>
#include <tandem/nn/optim/param_groups.h>
#include <tandem/nn/optim/sgd.h>
#include <tandem/nn/pooling.h>
#include <tandem/nn/resnet.h>
#include <tandem/nn/serialize.h>
#include <tandem/nn/transformer.h>
