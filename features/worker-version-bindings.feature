@AtLeastOnceQueue-0.2.0 @worker-version-binding
Feature: queueProducerBindings of WorkerVersion 0.5.0

  Background:
    Given a queue "q"
    And a worker "w"

  @Q-BIND-1 @Q-BIND-2 @Q-MSG-1
  Scenario: a version without queueProducerBindings is accepted
    When I create a version "v2" of "w" with:
      """
      {}
      """
    Then the request is accepted

  @Q-BIND-3
  Scenario Outline: a binding name must be a JavaScript identifier of 1..64 characters
    When I create a version "v2" of "w" with:
      """
      {"queueProducerBindings": [{"name": "<name>", "resource": {"resourceUid": "{{uid:q}}"}}]}
      """
    Then the request is <outcome>

    Examples:
      | name                                                              | outcome                            |
      | TASKS                                                             | accepted                           |
      | _t$1                                                              | accepted                           |
      | A234567890123456789012345678901234567890123456789012345678901234  | accepted                           |
      | A2345678901234567890123456789012345678901234567890123456789012345 | refused with 422 "invalid_spec"    |
      | 1TASKS                                                            | refused with 422 "invalid_spec"    |
      | TA-SKS                                                            | refused with 422 "invalid_spec"    |
      |                                                                   | refused with 422 "invalid_spec"    |

  @Q-BIND-3
  Scenario: binding names are unique in the array
    When I create a version "v2" of "w" with:
      """
      {"queueProducerBindings": [
        {"name": "TASKS", "resource": {"resourceUid": "{{uid:q}}"}},
        {"name": "TASKS", "resource": {"resourceUid": "{{uid:q}}"}}
      ]}
      """
    Then the request is refused with 422 "invalid_spec"

  @Q-BIND-3
  Scenario: a binding name cannot collide with a var
    When I create a version "v2" of "w" with:
      """
      {"vars": {"TASKS": "x"}, "queueProducerBindings": [{"name": "TASKS", "resource": {"resourceUid": "{{uid:q}}"}}]}
      """
    Then the request is refused with 422 "invalid_spec"

  @Q-BIND-3
  Scenario: a binding name cannot collide with a secret
    When I create a version "v2" of "w" with:
      """
      {"privateInputs": {"secrets": {"TASKS": "x"}}, "queueProducerBindings": [{"name": "TASKS", "resource": {"resourceUid": "{{uid:q}}"}}]}
      """
    Then the request is refused with 422 "invalid_spec"

  @Q-BIND-1
  Scenario: at most 64 bindings
    When I create a version "v2" of "w" with 65 bindings to "q"
    Then the request is refused with 422 "invalid_spec"
    When I create a version "v3" of "w" with 64 bindings to "q"
    Then the request is accepted

  @Q-BIND-2 @Q-REF-3 @Q-REF-4 @Q-REF-5 @Q-UNK-1 @Q-UNK-2
  Scenario Outline: a binding's resource must be a queue of the same space, by UID, in a closed shape
    Given a queue "elsewhere" in another space
    When I create a version "v2" of "w" with:
      """
      {"queueProducerBindings": [<binding>]}
      """
    Then the request is refused with 422 "<code>"

    Examples:
      | binding                                                                     | code              |
      | {"name": "T", "resource": {"resourceUid": "{{nouid}}"}}                     | invalid_reference |
      | {"name": "T", "resource": {"resourceUid": "{{uid:w}}"}}                     | invalid_reference |
      | {"name": "T", "resource": {"resourceUid": "{{uid:elsewhere}}"}}             | invalid_reference |
      | {"name": "T", "resource": {"resourceUid": "{{name:q}}"}}                    | invalid_reference |
      | {"name": "T", "resource": {"resourceUid": "{{uid:q}}", "name": "q"}}        | invalid_spec      |
      | {"name": "T", "resource": {"resourceUid": "{{uid:q}}"}, "mode": "send"}     | invalid_spec      |
