"""UPDATE_AND_CREATE_TOPIC answers only once the NameServer serves the new route."""

from __future__ import annotations

from lakemq.client.admin import Admin
from tests.cluster import Cluster


async def test_route_is_served_when_create_topic_returns(cluster: Cluster) -> None:
    async with Admin(cluster.namesrv_addr) as admin:
        for i in range(12):  # the race this guards against loses about one time in three
            queues = 1 + i % 4
            topic = f"RouteAfterCreate{i}"
            await admin.create_topic(topic, queue_nums=queues)
            route = await admin.api.get_topic_route(topic)
            assert route is not None, f"{topic} has no route right after creation"
            assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [(queues, queues)]
        await admin.create_topic("RouteAfterCreate0", queue_nums=5)
        route = await admin.api.get_topic_route("RouteAfterCreate0")
        assert route is not None and route.queue_datas[0].write_queue_nums == 5
